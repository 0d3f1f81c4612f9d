package readiness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// late returns the Kustomizations to ask to apply: each reads a followed
// change the GitRepository has fetched, yet has been seen idle without
// attempting the fetched revision for ApplyGrace. Each is asked once per
// revision.
func (f *Follower) late(st flux.State, now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.o.NoReconcile || st.Fetched == "" {
		return nil
	}
	var late []string
	for _, k := range st.Kustomizations {
		if k.LastAttempted == st.Fetched || k.Reconciling || f.askedApply[k.Name] == st.Fetched || !f.behind(k, st.Fetched) {
			delete(f.idleSince, k.Name)
			continue
		}
		since, seen := f.idleSince[k.Name]
		if !seen {
			f.idleSince[k.Name] = now
			continue
		}
		if now.Sub(since) < f.o.ApplyGrace {
			continue
		}
		delete(f.idleSince, k.Name)
		f.askedApply[k.Name] = st.Fetched
		late = append(late, k.Name)
	}
	return late
}

// behind reports whether Kustomization k has yet to apply a followed
// change that revision fetched holds; f.mu is held.
func (f *Follower) behind(k flux.Kustomization, fetched string) bool {
	for _, p := range f.pending {
		if f.branch.atOrAfter(fetched, p.Commit) && !f.branch.atOrAfter(k.LastApplied, p.Commit) && reads(k, p.Releases) {
			return true
		}
	}
	return false
}

// appliedIn reports whether every Kustomization that reads p applied it in
// st, shard folders' own included; f.mu is held.
func (f *Follower) appliedIn(p *follow, st flux.State) bool {
	for _, k := range st.Kustomizations {
		if reads(k, p.Releases) && !f.branch.atOrAfter(k.LastApplied, p.Commit) {
			return false
		}
	}
	for _, name := range p.shards {
		sh, ok := st.Shards[name]
		if ok && !f.shardHolds(sh, p) || !ok && p.OwnShards {
			// A folder of its own whose Kustomization or ExternalArtifact
			// is not made yet (its first tenant) has applied nothing.
			return false
		}
	}
	return true
}

// shardHolds reports whether the archive of a shard folder is from p's
// commit or a later one; f.mu is held.
func (f *Follower) shardHolds(sh flux.Shard, p *follow) bool {
	return sh.Revision != "" && sh.Applied == sh.Revision && f.branch.atOrAfter(sh.Origin, p.Commit)
}

// shardFailed returns a shard folder of p whose Kustomization failed to
// apply the archive published from p's commit or a later one.
func (f *Follower) shardFailed(p *follow, st flux.State) (string, flux.Shard, bool) {
	for _, name := range p.shards {
		sh, ok := st.Shards[name]
		if ok && sh.Revision != "" && sh.Applied != sh.Revision && sh.Attempted == sh.Revision &&
			sh.Ready.Status == "False" && f.branch.atOrAfter(sh.Origin, p.Commit) {
			return name, sh, true
		}
	}
	return "", flux.Shard{}, false
}

// live returns the releases of p that no later change replaced.
func live(p *follow) []gitops.Release {
	var out []gitops.Release
	for _, r := range p.Releases {
		if _, ok := p.replaced[releaseKey(r)]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// tie reads, from the API server, the generation of the releases of each
// followed change the Kustomizations applied in st, once per change: the
// HelmRelease's state counts for the change only from that generation on.
// The follower sees Kustomizations and HelmReleases through separate
// watches, so it may see a Kustomization that applied the commit next to a
// HelmRelease as it was before (Ready at the old spec, or failed at it); a
// reading of the API server made after the apply was seen has the
// generation the apply made, or a later one.
func (f *Follower) tie(ctx context.Context, st flux.State) {
	f.mu.Lock()
	var tying []*follow
	want := map[string]bool{}
	for _, p := range f.pending {
		if p.tied || p.by != "" || !(!p.applied.IsZero() || f.appliedIn(p, st)) {
			continue
		}
		n := 0
		for _, r := range live(p) {
			if !r.Gone {
				want[releaseKey(r)] = true
				n++
			}
		}
		if n == 0 {
			p.tied = true
			continue
		}
		tying = append(tying, p)
	}
	f.mu.Unlock()
	if len(tying) == 0 {
		return
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	gens, err := f.cluster.Generations(ctx, keys)
	if err != nil {
		f.readFailed(ctx, fmt.Errorf("read the generations of %d HelmReleases: %w", len(keys), err))
		return // tried again at the next step
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range tying {
		p.gens = map[string]int64{}
		for _, r := range p.Releases {
			p.gens[releaseKey(r)] = gens[releaseKey(r)]
		}
		p.tied = true
	}
}

// judge moves p on with st. It returns p's event when p is finished and the
// stages p reached now; f.mu is held.
func (f *Follower) judge(p *follow, st flux.State, now time.Time) (Event, bool, []string) {
	if ev, ok := f.superseded(p, now); ok {
		return ev, true, nil
	}
	var reached []string
	if p.fetched.IsZero() && f.branch.atOrAfter(st.Fetched, p.Commit) {
		p.fetched = now
		reached = append(reached, StageFetched)
	}
	ev := Event{Target: p.Target}
	end := func(outcome, reason, msg string) (Event, bool, []string) {
		ev.Outcome, ev.Reason, ev.Message, ev.Fetched, ev.Applied, ev.Done = outcome, reason, msg, p.fetched, p.applied, now
		return ev, true, reached
	}
	if p.applied.IsZero() {
		for _, k := range st.Kustomizations {
			if reads(k, p.Releases) && !f.branch.atOrAfter(k.LastApplied, p.Commit) &&
				k.Ready.Status == "False" && f.branch.atOrAfter(k.LastAttempted, p.Commit) {
				return end(OutcomeFailed, k.Ready.Reason, fmt.Sprintf("Kustomization %s: %s", k.Name, k.Ready.Message))
			}
		}
		if name, sh, failed := f.shardFailed(p, st); failed {
			return end(OutcomeFailed, sh.Ready.Reason, fmt.Sprintf("Kustomization %s: %s", name, sh.Ready.Message))
		}
		if f.appliedIn(p, st) {
			if p.fetched.IsZero() {
				p.fetched = now
				reached = append(reached, StageFetched)
			}
			p.applied = now
			reached = append(reached, StageApplied)
		}
	}
	var waiting []string
	for _, r := range live(p) {
		if !r.Gone && !p.tied {
			waiting = append(waiting, fmt.Sprintf("HelmRelease %s/%s not read since the apply", r.Namespace, r.Name))
			continue
		}
		hr := st.Releases[releaseKey(r)]
		state, failed := releaseState(r, hr, p.gens[releaseKey(r)])
		if failed && !p.applied.IsZero() {
			return end(OutcomeFailed, hr.Ready.Reason, fmt.Sprintf("HelmRelease %s/%s: %s", r.Namespace, r.Name, hr.Ready.Message))
		}
		if state != "" {
			waiting = append(waiting, fmt.Sprintf("HelmRelease %s/%s %s", r.Namespace, r.Name, state))
		}
	}
	if !p.applied.IsZero() && len(waiting) == 0 {
		return end(OutcomeReady, "", "")
	}
	if now.Sub(p.Pushed) >= f.o.Timeout {
		if p.applied.IsZero() {
			waiting = append([]string{"the Kustomizations have not applied the commit"}, waiting...)
		}
		return end(OutcomeTimeout, "", "not ready after "+f.o.Timeout.String()+": "+strings.Join(waiting, "; "))
	}
	return ev, false, reached
}

// reads reports whether Kustomization k applies any of the releases' files
// (all of them when there are none: a change of the whole tier).
func reads(k flux.Kustomization, rs []gitops.Release) bool {
	if len(rs) == 0 {
		return true
	}
	for _, r := range rs {
		if k.Path == "" || strings.HasPrefix(r.Path, k.Path+"/") {
			return true
		}
	}
	return false
}

// Transient reasons of a Ready=False HelmRelease: Flux is still at work.
var transient = []string{"Progressing", "ProgressingWithRetry", "DependencyNotReady", ""}

// sourceWaits are the endings of a SourceNotReady message while the chart
// is on its way; any other (a chart version that does not exist, a
// repository that fails) is the source's failure.
var sourceWaits = []string{"latest generation of object has not been reconciled", "does not have an artifact"}

// failedNow reports whether hr's Ready condition is a failure of its
// current generation. helm-controller leaves observedGeneration behind
// while its chart is not ready, so the condition's own generation counts.
func failedNow(hr flux.HelmRelease) bool {
	c := hr.Ready
	if c.Status != "False" || slices.Contains(transient, c.Reason) || c.ObservedGeneration != hr.Generation {
		return false
	}
	if c.Reason == "SourceNotReady" {
		for _, w := range sourceWaits {
			if strings.HasSuffix(c.Message, w) {
				return false
			}
		}
	}
	return true
}

// releaseState says what a release still waits for ("" when it is as r
// asks) and whether Flux reports a failure of it. gen is the generation
// the HelmRelease had once the change was applied: what it shows of an
// older one says nothing of the change.
func releaseState(r gitops.Release, hr flux.HelmRelease, gen int64) (string, bool) {
	if r.Gone {
		if hr.Exists {
			return "still exists", false
		}
		return "", false
	}
	switch {
	case !hr.Exists:
		return "does not exist yet", false
	case hr.Deleting:
		return "is being deleted", false
	case hr.Generation < gen:
		return fmt.Sprintf("seen at generation %d, before the change's %d", hr.Generation, gen), false
	case failedNow(hr):
		return "failed", true
	case !hr.Current:
		return "not reconciled yet: " + hr.Ready.Reason + " " + hr.Ready.Message, false
	case hr.Stalled.Status == "True":
		return "stalled", true
	case hr.Ready.Status != "True":
		return fmt.Sprintf("Ready=%s %s: %s", orUnknown(hr.Ready.Status), hr.Ready.Reason, hr.Ready.Message), false
	case hr.Ready.ObservedGeneration != 0 && hr.Ready.ObservedGeneration < gen:
		return fmt.Sprintf("Ready at generation %d, before the change's %d", hr.Ready.ObservedGeneration, gen), false
	case !versionMatches(r.Version, hr.ChartVersion):
		return fmt.Sprintf("at chart %s, not %s", hr.ChartVersion, r.Version), false
	}
	return "", false
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// versionMatches reports whether a chart version satisfies a HelmRelease's
// version (a constraint such as "1.0.x", or exact); any version does when it
// asks for none.
func versionMatches(want, have string) bool {
	if want == "" || want == "*" {
		return have != ""
	}
	c, err := semver.NewConstraint(want)
	if err != nil {
		return want == have
	}
	v, err := semver.NewVersion(have)
	return err == nil && c.Check(v)
}
