package readiness

import (
	"fmt"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// releaseKey names a HelmRelease: what two changes must share for one to
// replace the other.
func releaseKey(r gitops.Release) string { return r.Namespace + "/" + r.Name }

// supersede lets t replace what it changes of the followed changes that
// come before it on the branch: a release a later change sets (another
// chart version, or removed, or back again) is no longer the earlier
// change's to wait for. A change whose every release is replaced is
// superseded by the change that replaced the last one. f.mu is held.
//
// Releases name the tenant (its HelmRelease), the tier (a deployment
// touches every HelmRelease of it) and the pooled environment alike, so
// deployment 2.0 then 3.0 of a tier, an onboarding then an offboarding of a
// tenant, or an onboarding then a deployment of its tier are caught the
// same way; a deployment followed by the offboarding of one of its tenants
// still waits for the others.
func (f *Follower) supersede(t Target) {
	sets := map[string]bool{}
	for _, r := range t.Releases {
		sets[releaseKey(r)] = true
	}
	if len(sets) == 0 {
		return
	}
	for _, p := range f.pending {
		if p.by != "" || p.MessageID == t.MessageID || !f.before(p.Commit, t.Commit) {
			continue
		}
		own := map[string]bool{}
		for _, r := range p.Releases {
			k := releaseKey(r)
			own[k] = true
			if !sets[k] {
				continue
			}
			if p.replaced == nil {
				p.replaced = map[string]string{}
			}
			if _, ok := p.replaced[k]; !ok {
				p.replaced[k] = t.MessageID
			}
		}
		if len(own) > 0 && len(p.replaced) == len(own) {
			p.by, p.byCommit = t.MessageID, t.Commit
		}
	}
}

// before reports whether commit a comes before commit b on the branch.
func (f *Follower) before(a, b string) bool {
	return f.branch.atOrAfter(b, a) && a != b
}

// superseded returns p's event when a later change replaced all of it.
func (f *Follower) superseded(p *follow, now time.Time) (Event, bool) {
	if p.by == "" {
		return Event{}, false
	}
	return Event{Target: p.Target, Outcome: OutcomeSuperseded, SupersededBy: p.by,
		Message: fmt.Sprintf("replaced by message %s (commit %s) before it was ready", p.by, p.byCommit),
		Fetched: p.fetched, Applied: p.applied, Done: now}, true
}
