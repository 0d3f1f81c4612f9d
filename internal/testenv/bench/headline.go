package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RunInfo is what the headline rows say of the run itself: when, on what,
// and the command that repeats it.
type RunInfo struct {
	Date    time.Time
	Cores   int
	Command string // "make bench", or "go run ./cmd/bench -only ledger ..."
}

// Headline is one row of the README's headline numbers: what is measured
// (linked to its section of docs/performance.md), the number with the
// target it is checked against and met or missed, the size, the date and
// machine, and the command that measures it. Each cell is a few words, so
// that updating the README after a run is a copy.
type Headline struct {
	What, Number, Size, When, Command string
}

// HeadlineHeader is the header of the headline table, in the README as
// here (docs/docs_test.go reads the README's table by it).
const HeadlineHeader = "| what | number (target: verdict) | size | date, machine | command |"

// Row renders h as a row of the headline table.
func (h Headline) Row() string {
	return fmt.Sprintf("| %s | %s | %s | %s | `%s` |", h.What, h.Number, h.Size, h.When, h.Command)
}

// HeadlineTable renders rows under the headline table's header.
func HeadlineTable(rows []Headline) string {
	var b strings.Builder
	b.WriteString(HeadlineHeader + "\n|---|---|---|---|---|\n")
	for _, h := range rows {
		b.WriteString(h.Row() + "\n")
	}
	return b.String()
}

// The sections of docs/performance.md that explain each row: its method,
// its full table and what limits it (docs/docs_test.go checks the README's
// links to them).
const (
	anchorGit     = "latency-backlog-and-memory"
	anchorSigning = "commit-signing"
	anchorGitea   = "against-real-gitea"
	anchorLedger  = "ledger-at-volume-issue-20"
	anchorBacklog = "a-long-backlog-on-gitea"
	anchorLive    = "time-to-live-in-four-layouts-issue-21"
)

// doc links what to its section of docs/performance.md, as the README
// links it.
func doc(what, anchor string) string { return "[" + what + "](docs/performance.md#" + anchor + ")" }

// verdict is a target's outcome as the headline rows say it.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "**missed**"
}

// thousands writes n with commas: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ms writes a latency in milliseconds, rounded: 60, 1,352.
func ms(v float64) string { return thousands(int(v + 0.5)) }

// joined writes each of xs with f, separated by " / ".
func joined[T any](xs []T, f func(T) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, " / ")
}

// tenants writes sizes as "10 / 1,000 / 10,000 tenants".
func tenants(sizes ...int) string {
	return joined(sizes, thousands) + " tenants"
}

// Headlines are the headline rows of what a run measured, each target
// checked as CheckTargets and CheckLayoutTargets check it. A part the run
// did not measure has no row.
func Headlines(run RunInfo, results []SizeResult, gitea []GiteaResult, ledger *LedgerResult, live []LiveResult) []Headline {
	when := fmt.Sprintf("%s, %d cores", run.Date.Format("2006-01-02"), run.Cores)
	row := func(what, number, size string) Headline {
		return Headline{What: what, Number: number, Size: size, When: when, Command: run.Command}
	}
	var out []Headline

	// Single messages on git's server, against the floor.
	var single []SizeResult
	for _, r := range results {
		if r.Worker.N > 0 && r.Floor.N > 0 {
			single = append(single, r)
		}
	}
	slices.SortFunc(single, func(a, b SizeResult) int { return a.Tenants - b.Tenants })
	if len(single) > 0 {
		sizes := make([]int, len(single))
		p50Met, p99Met := true, true
		for i, r := range single {
			sizes[i] = r.Tenants
			p50Met = p50Met && r.Worker.P50 <= TargetP50OverFloor*r.Floor.P50
			p99Met = p99Met && r.Worker.P99 <= TargetP99OverFloor*r.Floor.P99
		}
		out = append(out, row(doc("`SendMessage` to the commit on the branch, p50", anchorGit),
			fmt.Sprintf("%s ms, %s the floor's (≤%.1fx: %s)",
				joined(single, func(r SizeResult) string { return ms(r.Worker.P50) }),
				joined(single, func(r SizeResult) string { return fmt.Sprintf("%.2fx", r.Worker.P50/r.Floor.P50) }),
				TargetP50OverFloor, verdict(p50Met)),
			tenants(sizes...)))
		number := fmt.Sprintf("p99 %s the floor's (≤%.0fx: %s)",
			joined(single, func(r SizeResult) string { return fmt.Sprintf("%.2fx", r.Worker.P99/r.Floor.P99) }),
			TargetP99OverFloor, verdict(p99Met))
		byTenants := map[int]SizeResult{}
		for _, r := range single {
			byTenants[r.Tenants] = r
		}
		if small, ok := byTenants[10]; ok {
			if large, ok := byTenants[10000]; ok {
				flat := large.Worker.P50 / small.Worker.P50
				number += fmt.Sprintf("; p50 at 10,000 %.2fx p50 at 10 (≤%.1fx: %s)", flat, TargetFlatness, verdict(flat <= TargetFlatness))
			}
		}
		out = append(out, row(doc("the same: p99, and p50's growth with size", anchorGit), number, tenants(sizes...)))
	}

	// The backlog, memory and signing of the same run.
	for _, r := range results {
		if r.Throughput <= 0 || r.Tenants != backlogTargetAt {
			continue
		}
		number := fmt.Sprintf("%.0f changes/s (≥%d/s: %s)", r.Throughput, TargetBacklogPerSecond, verdict(r.Throughput >= TargetBacklogPerSecond))
		if r.ThroughputRatio > 0 {
			number += fmt.Sprintf(", %.0fx less time a tenant than the reference's steps (≥%dx: %s)",
				r.ThroughputRatio, TargetBacklogOverReference, verdict(r.ThroughputRatio >= TargetBacklogOverReference))
		} else {
			number += "; the reference's steps not measured"
		}
		out = append(out, row(doc("a backlog of single onboardings, on git's server", anchorGit), number, tenants(r.Tenants)))
	}
	for _, r := range results {
		if r.Tenants == 10000 && r.PeakRSSMB > 0 {
			out = append(out, row(doc("the worker's memory, single messages", anchorGit),
				fmt.Sprintf("%.0f MB peak RSS (≤%d MB: %s)", r.PeakRSSMB, TargetRSSMB, verdict(r.PeakRSSMB <= TargetRSSMB)),
				tenants(r.Tenants)))
		}
	}
	var signed []SizeResult
	for _, r := range single {
		if r.Signed.N > 0 {
			signed = append(signed, r)
		}
	}
	if len(signed) > 0 {
		met := true
		sizes := make([]int, len(signed))
		for i, r := range signed {
			sizes[i] = r.Tenants
			met = met && r.SignedOverWorker <= TargetSignedOverWorker
		}
		out = append(out, row(doc("a worker signing every commit (ed25519), p50", anchorSigning),
			fmt.Sprintf("%s the unsigned worker's (≤%.2fx: %s)",
				joined(signed, func(r SizeResult) string { return fmt.Sprintf("%.3fx", r.SignedOverWorker) }),
				TargetSignedOverWorker, verdict(met)),
			tenants(sizes...)))
	}

	// Real Gitea, against the git command line's own push.
	var onGitea []GiteaResult
	for _, r := range gitea {
		if r.Worker.N > 0 && r.CLIPush.N > 0 {
			onGitea = append(onGitea, r)
		}
	}
	slices.SortFunc(onGitea, func(a, b GiteaResult) int { return a.Tenants - b.Tenants })
	if len(onGitea) > 0 {
		sizes := make([]int, len(onGitea))
		p50Met, p99Met := true, true
		for i, r := range onGitea {
			sizes[i] = r.Tenants
			p50Met = p50Met && r.Worker.P50 <= TargetGiteaP50OverCLI*r.CLIPush.P50
			p99Met = p99Met && r.Worker.P99 <= TargetGiteaP99OverCLI*r.CLIPush.P99
		}
		number := fmt.Sprintf("%s ms, %s the CLI's (≤%.1fx: %s); p99 %s (≤%.1fx: %s)",
			joined(onGitea, func(r GiteaResult) string { return ms(r.Worker.P50) }),
			joined(onGitea, func(r GiteaResult) string { return fmt.Sprintf("%.2fx", r.Worker.P50/r.CLIPush.P50) }),
			TargetGiteaP50OverCLI, verdict(p50Met),
			joined(onGitea, func(r GiteaResult) string { return fmt.Sprintf("%.2fx", r.Worker.P99/r.CLIPush.P99) }),
			TargetGiteaP99OverCLI, verdict(p99Met))
		for _, r := range onGitea {
			if r.Throughput > 0 && r.Tenants == backlogTargetAt {
				number += fmt.Sprintf("; backlog %.0f/s (≥%d/s: %s)", r.Throughput, TargetBacklogPerSecond, verdict(r.Throughput >= TargetBacklogPerSecond))
			}
		}
		out = append(out, row(doc("the same on real Gitea, p50 against the git CLI's push", anchorGitea), number, tenants(sizes...)))
	}

	if ledger != nil {
		out = append(out, ledgerHeadlines(ledger, row)...)
	}
	out = append(out, liveHeadlines(live, row)...)
	return out
}

// ledgerHeadlines are the rows of the ledger at volume.
func ledgerHeadlines(l *LedgerResult, row func(what, number, size string) Headline) []Headline {
	var out []Headline
	// A full ledger against an empty one, on each server: the worst ratio.
	type worst struct {
		server string
		over   float64
		ids    int
	}
	empty := map[string]bool{}
	for _, x := range l.Latency {
		if x.IDs == 0 {
			empty[x.Server] = true
		}
	}
	var ws []worst
	var ids []int
	met := true
	for _, x := range l.Latency {
		if x.IDs == 0 || !empty[x.Server] || x.OverEmpty <= 0 {
			continue
		}
		if !slices.Contains(ids, x.IDs) {
			ids = append(ids, x.IDs)
		}
		met = met && x.OverEmpty <= TargetLedgerOverEmpty
		i := slices.IndexFunc(ws, func(w worst) bool { return w.server == x.Server })
		if i < 0 {
			ws = append(ws, worst{x.Server, x.OverEmpty, x.IDs})
		} else if x.OverEmpty > ws[i].over {
			ws[i] = worst{x.Server, x.OverEmpty, x.IDs}
		}
	}
	if len(ws) > 0 {
		slices.Sort(ids)
		number := "at most " + joined(ws, func(w worst) string {
			return fmt.Sprintf("%.2fx on %s (%s ids)", w.over, serverName(w.server), thousands(w.ids))
		}) + fmt.Sprintf(" (≤%.1fx: %s)", TargetLedgerOverEmpty, verdict(met))
		out = append(out, row(doc("p50 with a full ledger against an empty one", anchorLedger), number,
			fmt.Sprintf("%s tenants, %s message ids", thousands(l.Tenants), strings.Join(mapSlice(ids, thousands), " and "))))
	}
	for _, v := range l.Revisions {
		out = append(out, row(doc("new revisions of `main` for no-ops, on "+serverName(v.Server), anchorLedger),
			fmt.Sprintf("%s for %s changes of %s messages (one a change, none a no-op: %s); the ledger branch: %s",
				thousands(v.MainRevisions), thousands(v.Changed), thousands(v.Messages), verdict(v.Equal), thousands(v.LedgerRevisions)),
			tenants(l.Tenants)))
	}
	if b := l.Backlog; b != nil {
		number := fmt.Sprintf("%.0f/s (≥%d/s: %s)", b.PerSecond, TargetLedgerBacklogPerSecond, verdict(b.PerSecond >= TargetLedgerBacklogPerSecond))
		if b.FirstPerSecond > 0 {
			number += fmt.Sprintf("; last %s at %.2fx the first's rate (≥%.0f: %s)", thousands(b.Window), b.LastOverFirst,
				TargetLedgerLastOverFirst, verdict(b.LastOverFirst >= TargetLedgerLastOverFirst))
			for _, p := range b.Peers {
				if p.Bounded && p.Records == recordsPerPush.String() {
					number += fmt.Sprintf("; the git CLI's constant pushes: %.2fx", p.LastOverFirst)
				}
			}
		} else {
			number += fmt.Sprintf("; last against first not measured (a window of %s is less than a batch)", thousands(b.Window))
		}
		layout := "the tiers' folders"
		if b.Shards > 0 {
			layout = fmt.Sprintf("%d shard folders a tier", b.Shards)
		}
		out = append(out, row(doc(fmt.Sprintf("a backlog of %s %s on %s", thousands(b.Messages), b.Kind, serverName(b.Server)), anchorBacklog), number,
			fmt.Sprintf("%s tenants before, %s", thousands(b.Tenants), layout)))
	}
	return out
}

// liveHeadlines are the rows of the time to live: the chosen layout at
// each size, against its targets and today's layout where the run has it.
func liveHeadlines(live []LiveResult, row func(what, number, size string) Headline) []Headline {
	var out []Headline
	secs := func(msv float64) string { return fmt.Sprintf("%.1f s", msv/1000) }
	for _, r := range live {
		switch {
		case r.Layout == LayoutArtifacts:
			var t *LayoutTarget
			for i := range LayoutTargets {
				if LayoutTargets[i].Tenants == r.Tenants {
					t = &LayoutTargets[i]
				}
			}
			p50, p95 := r.Request.P50, r.Request.P95
			var parts []string
			if r.TimedOut != nil {
				parts = append(parts, fmt.Sprintf("sample %d not Ready within %.0f s (every sample Ready: %s)", r.TimedOut.Sample, r.TimedOut.AfterMS/1000, verdict(false)))
			}
			if t == nil {
				parts = append(parts, fmt.Sprintf("p50 %s, p95 %s (no target at this size)", secs(p50), secs(p95)))
			} else {
				parts = append(parts, fmt.Sprintf("p50 %s (≤%g s: %s)", secs(p50), t.P50.Seconds(), verdict(p50 > 0 && p50 <= float64(t.P50.Milliseconds()))))
				if p50 > 0 {
					parts = append(parts, fmt.Sprintf("p95 %.1fx p50 (≤%.0fx: %s)", p95/p50, t.P95OverP50, verdict(p95 <= t.P95OverP50*p50)))
				}
			}
			for _, one := range live {
				if one.Tenants != r.Tenants || one.Layout != LayoutOne || one.Request.P50 <= 0 || p50 <= 0 {
					continue
				}
				faster := one.Request.P50 / p50
				target := "no target at this size"
				if t != nil && t.FasterThanOne > 0 {
					target = fmt.Sprintf("≥%.0fx: %s", t.FasterThanOne, verdict(faster >= t.FasterThanOne))
				}
				parts = append(parts, fmt.Sprintf("%.1fx faster than the platform's one Kustomization (%s; %s)", faster, secs(one.Request.P50), target))
			}
			out = append(out, row(doc("the new tenant's HelmRelease Ready after `SendMessage`, artifacts layout", anchorLive),
				strings.Join(parts, ", "), fmt.Sprintf("%s tenants, %d samples", thousands(r.Tenants), r.Request.N)))
		case r.Layout == LayoutOne && r.IntervalOverRequest > 0:
			out = append(out, row(doc("the new tenant's HelmRelease Ready after `SendMessage`, the platform's layout", anchorLive),
				fmt.Sprintf("p50 %s, %.1fx faster than at Flux's interval (%s; no target)", secs(r.Request.P50), r.IntervalOverRequest, secs(r.Interval.P50)),
				fmt.Sprintf("%s tenants, %d samples", thousands(r.Tenants), r.Request.N)))
		}
	}
	return out
}

// serverName is a ledger host's name as the docs write it.
func serverName(host string) string {
	switch host {
	case "gitea":
		return "Gitea"
	case "http-backend":
		return "git's http-backend"
	}
	return host
}

func mapSlice[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}
