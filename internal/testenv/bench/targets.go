package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// LayoutTarget is issue 21's target for the chosen layout (LayoutArtifacts)
// at a number of tenants, with the reconcile request.
type LayoutTarget struct {
	Tenants int
	// P50 is the most the time to live's p50 may be.
	P50 time.Duration
	// P95OverP50 is the most p95 may be, in p50s.
	P95OverP50 float64
	// FasterThanOne is how many times lower its p50 must be than today's
	// layout's (LayoutOne, Flux's defaults) in the same run; 0 for none.
	FasterThanOne float64
}

// LayoutTargets are the targets a run of both layouts at these sizes
// checks.
var LayoutTargets = []LayoutTarget{
	{Tenants: 500, P50: 5 * time.Second, P95OverP50: 2},
	{Tenants: 2000, P50: 10 * time.Second, P95OverP50: 2, FasterThanOne: 10},
}

// CheckLayoutTargets compares the layouts of a live run: at each size, the
// ratio of every layout's p50 to the chosen layout's, and each target whose
// rows the run has, met or missed. It returns the report, and an error
// naming every missed target. A target is missed when the chosen layout
// had a sample that was not Ready in time. A size without the rows a
// target needs is reported as not measured, not as met.
func CheckLayoutTargets(results []LiveResult) (string, error) {
	var b strings.Builder
	var missed []string
	bySize := map[int]map[string]LiveResult{}
	var sizes []int
	for _, r := range results {
		if bySize[r.Tenants] == nil {
			bySize[r.Tenants] = map[string]LiveResult{}
			sizes = append(sizes, r.Tenants)
		}
		bySize[r.Tenants][r.Layout] = r
	}
	fmt.Fprintln(&b, "layouts against the chosen one (artifacts), with the reconcile request:")
	for _, n := range sizes {
		chosen, ok := bySize[n][LayoutArtifacts]
		if !ok || chosen.Request.P50 <= 0 {
			continue
		}
		for _, r := range results {
			if r.Tenants == n && r.Layout != LayoutArtifacts && r.Request.P50 > 0 {
				fmt.Fprintf(&b, "%8d tenants: %-10s p50 %.1fx the chosen layout's\n", n, r.Layout, r.Request.P50/chosen.Request.P50)
			}
		}
	}
	for _, t := range LayoutTargets {
		chosen, ok := bySize[t.Tenants][LayoutArtifacts]
		if !ok {
			fmt.Fprintf(&b, "%8d tenants: not measured (run -live-sizes %d -live-layouts one,artifacts)\n", t.Tenants, t.Tenants)
			continue
		}
		check := func(what string, met bool) {
			verdict := "met"
			if !met {
				verdict = "MISSED"
				missed = append(missed, fmt.Sprintf("%d tenants: %s", t.Tenants, what))
			}
			fmt.Fprintf(&b, "%8d tenants: %-55s %s\n", t.Tenants, what, verdict)
		}
		p50, p95 := chosen.Request.P50, chosen.Request.P95
		if chosen.TimedOut != nil {
			check(fmt.Sprintf("every sample Ready (sample %d was not)", chosen.TimedOut.Sample), false)
		}
		check(fmt.Sprintf("p50 %.1f s <= %s", p50/1000, t.P50), p50 > 0 && p50 <= float64(t.P50.Milliseconds()))
		check(fmt.Sprintf("p95 %.1f s <= %.0fx p50 (%.1fx)", p95/1000, t.P95OverP50, p95/p50), p50 > 0 && p95 <= t.P95OverP50*p50)
		// Where a p95 goes: the worker's push, kustomize-controller's
		// apply (the HelmRelease made) and helm-controller's install.
		fmt.Fprintf(&b, "%8d tenants: p95 by stage: pushed %.1f s, HelmRelease made %.1f s, helm-controller's part %.1f s (p50 %.1f s)\n",
			t.Tenants, chosen.Pushed.P95/1000, chosen.Created.P95/1000, chosen.Helm.P95/1000, chosen.Helm.P50/1000)
		if t.FasterThanOne > 0 {
			one, ok := bySize[t.Tenants][LayoutOne]
			// A sample of one not Ready in time ended its run: its p50 is
			// of the samples before it, or, with none, the timeout itself;
			// either is a lower bound of its time.
			oneP50, bound := one.Request.P50, ""
			if ok && one.TimedOut != nil {
				bound = fmt.Sprintf(", one's sample %d not Ready within %.0f s: a lower bound", one.TimedOut.Sample, one.TimedOut.AfterMS/1000)
				if oneP50 <= 0 {
					oneP50 = one.TimedOut.AfterMS
				}
			}
			if !ok || oneP50 <= 0 {
				fmt.Fprintf(&b, "%8d tenants: %.0fx faster than one: not measured (add -live-layouts one)\n", t.Tenants, t.FasterThanOne)
				continue
			}
			check(fmt.Sprintf("%.1fx faster than one (>= %.0fx%s)", oneP50/p50, t.FasterThanOne, bound), p50 > 0 && oneP50 >= t.FasterThanOne*p50)
		}
	}
	if len(missed) > 0 {
		return b.String(), errors.New("layout targets missed: " + strings.Join(missed, "; "))
	}
	return b.String(), nil
}

// Targets of the single-message, Gitea and ledger runs, which
// docs/performance.md describes and the README cites.
const (
	// TargetP50OverFloor and TargetP99OverFloor: a single message's p50
	// and p99 against one file committed and pushed by the same code (the
	// floor), at every size.
	TargetP50OverFloor = 1.3
	TargetP99OverFloor = 2.0
	// TargetFlatness: p50 at 10,000 tenants over p50 at 10.
	TargetFlatness = 1.5
	// TargetBacklogPerSecond and TargetBacklogOverReference: the backlog
	// at 1,000 tenants, changes a second and less time per tenant than the
	// reference's steps.
	TargetBacklogPerSecond     = 100
	TargetBacklogOverReference = 30
	// backlogTargetAt is the repository size the backlog's targets are
	// set at.
	backlogTargetAt = 1000
	// TargetRSSMB: the worker's peak RSS at 10,000 tenants.
	TargetRSSMB = 150
	// TargetSignedOverWorker: the p50 of a worker signing every commit
	// against the plain one's.
	TargetSignedOverWorker = 1.05
	// TargetGiteaP50OverCLI and TargetGiteaP99OverCLI: the worker on Gitea
	// against the git command line's own push to it.
	TargetGiteaP50OverCLI = 1.0
	TargetGiteaP99OverCLI = 1.5
	// TargetLedgerOverEmpty: p50 with a full ledger against an empty one
	// on the same server.
	TargetLedgerOverEmpty = 1.1
	// TargetLedgerBacklogPerSecond and TargetLedgerLastOverFirst: the
	// long backlog, messages a second and its last window's rate against
	// its first's.
	TargetLedgerBacklogPerSecond = 100
	TargetLedgerLastOverFirst    = 1.0
)

// verdicts is a report of targets met and missed.
type verdicts struct {
	b      strings.Builder
	missed []string
}

func (v *verdicts) check(where, what string, met bool) {
	verdict := "met"
	if !met {
		verdict = "MISSED"
		v.missed = append(v.missed, where+": "+what)
	}
	fmt.Fprintf(&v.b, "%-26s %-58s %s\n", where, what, verdict)
}

func (v *verdicts) note(where, what string) { fmt.Fprintf(&v.b, "%-26s %s\n", where, what) }

// CheckTargets compares the single-message, Gitea and ledger results of a
// run with their targets. It returns the report, and an error naming every
// missed target. A target whose numbers the run does not have (a size or a
// part not run) is left out, never counted as met.
func CheckTargets(results []SizeResult, gitea []GiteaResult, ledger *LedgerResult) (string, error) {
	var v verdicts
	bySize := map[int]SizeResult{}
	for _, r := range results {
		where := fmt.Sprintf("git, %d tenants", r.Tenants)
		bySize[r.Tenants] = r
		if r.Worker.N > 0 && r.Floor.N > 0 {
			v.check(where, fmt.Sprintf("p50 %.2fx the floor's (<= %.1fx)", r.Worker.P50/r.Floor.P50, TargetP50OverFloor),
				r.Worker.P50 <= TargetP50OverFloor*r.Floor.P50)
			v.check(where, fmt.Sprintf("p99 %.2fx the floor's (<= %.1fx)", r.Worker.P99/r.Floor.P99, TargetP99OverFloor),
				r.Worker.P99 <= TargetP99OverFloor*r.Floor.P99)
		}
		if r.Throughput > 0 && r.Tenants != backlogTargetAt {
			v.note(where, fmt.Sprintf("backlog: its targets are at %d tenants (-backlog-at)", backlogTargetAt))
		} else if r.Throughput > 0 {
			v.check(where, fmt.Sprintf("backlog %.0f changes/s (>= %d)", r.Throughput, TargetBacklogPerSecond), r.Throughput >= TargetBacklogPerSecond)
			if r.ThroughputRatio > 0 {
				v.check(where, fmt.Sprintf("backlog %.0fx less time a tenant than the reference (>= %dx)", r.ThroughputRatio, TargetBacklogOverReference),
					r.ThroughputRatio >= TargetBacklogOverReference)
			}
		}
		if r.Tenants == 10000 && r.PeakRSSMB > 0 {
			v.check(where, fmt.Sprintf("worker RSS %.0f MB (<= %d MB)", r.PeakRSSMB, TargetRSSMB), r.PeakRSSMB <= TargetRSSMB)
		}
		if r.Signed.N > 0 && r.Worker.N > 0 {
			v.check(where, fmt.Sprintf("signed p50 %.3fx the plain one's (<= %.2fx)", r.SignedOverWorker, TargetSignedOverWorker),
				r.SignedOverWorker <= TargetSignedOverWorker)
		}
	}
	if small, large := bySize[10], bySize[10000]; small.Worker.N > 0 && large.Worker.N > 0 {
		v.check("git, 10 and 10000 tenants", fmt.Sprintf("p50 at 10,000 %.2fx p50 at 10 (<= %.1fx)", large.Worker.P50/small.Worker.P50, TargetFlatness),
			large.Worker.P50 <= TargetFlatness*small.Worker.P50)
	}
	for _, r := range gitea {
		if r.Worker.N == 0 || r.CLIPush.N == 0 {
			continue
		}
		where := fmt.Sprintf("Gitea, %d tenants", r.Tenants)
		v.check(where, fmt.Sprintf("p50 %.2fx the git CLI's push (<= %.1fx)", r.Worker.P50/r.CLIPush.P50, TargetGiteaP50OverCLI),
			r.Worker.P50 <= TargetGiteaP50OverCLI*r.CLIPush.P50)
		v.check(where, fmt.Sprintf("p99 %.2fx the git CLI's (<= %.1fx)", r.Worker.P99/r.CLIPush.P99, TargetGiteaP99OverCLI),
			r.Worker.P99 <= TargetGiteaP99OverCLI*r.CLIPush.P99)
	}
	for _, r := range gitea {
		if r.Throughput > 0 && r.Tenants == backlogTargetAt {
			v.check(fmt.Sprintf("Gitea, %d tenants", r.Tenants), fmt.Sprintf("backlog %.0f changes/s (>= %d)", r.Throughput, TargetBacklogPerSecond),
				r.Throughput >= TargetBacklogPerSecond)
		}
	}
	if ledger != nil {
		// Each p50 is over the smallest ledger's on its server: an empty
		// one only when the run had one (-ledger-ids 0,...).
		smallest := map[string]int{}
		for _, l := range ledger.Latency {
			if n, ok := smallest[l.Server]; !ok || l.IDs < n {
				smallest[l.Server] = l.IDs
			}
		}
		for _, l := range ledger.Latency {
			where := fmt.Sprintf("ledger, %s", l.Server)
			switch {
			case l.IDs == smallest[l.Server] || l.OverEmpty <= 0:
			case smallest[l.Server] != 0:
				v.note(where, fmt.Sprintf("p50 with %d ids: no empty ledger to compare with (-ledger-ids 0,...)", l.IDs))
			default:
				v.check(where, fmt.Sprintf("p50 with %d ids %.2fx the empty ledger's (<= %.1fx)", l.IDs, l.OverEmpty, TargetLedgerOverEmpty),
					l.OverEmpty <= TargetLedgerOverEmpty)
			}
		}
		for _, r := range ledger.Revisions {
			v.check(fmt.Sprintf("ledger, %s", r.Server), fmt.Sprintf("main gained %d revisions for %d changes, no-ops none", r.MainRevisions, r.Changed), r.Equal)
		}
		if l := ledger.Backlog; l != nil {
			where := fmt.Sprintf("ledger backlog, %s", l.Server)
			v.check(where, fmt.Sprintf("%d %s at %.0f/s (>= %d/s)", l.Messages, l.Kind, l.PerSecond, TargetLedgerBacklogPerSecond), l.PerSecond >= TargetLedgerBacklogPerSecond)
			if l.FirstPerSecond > 0 {
				v.check(where, fmt.Sprintf("last %d at %.2fx the first's rate (>= %.0f)", l.Window, l.LastOverFirst, TargetLedgerLastOverFirst),
					l.LastOverFirst >= TargetLedgerLastOverFirst)
			} else {
				v.note(where, fmt.Sprintf("last against first: not measured (a window of %d is less than a batch)", l.Window))
			}
		}
	}
	if len(v.missed) > 0 {
		return v.b.String(), errors.New("targets missed: " + strings.Join(v.missed, "; "))
	}
	return v.b.String(), nil
}
