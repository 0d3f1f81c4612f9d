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
