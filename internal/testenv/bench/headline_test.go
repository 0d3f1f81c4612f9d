package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestRowHeadlines: a run's results come out as the README's headline
// rows, one line a claim, each target met or missed by its own numbers,
// and a part the run did not measure has no row.
func TestRowHeadlines(t *testing.T) {
	run := RunInfo{Date: time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC), Cores: 2, Command: "make bench"}
	st := func(p50, p99 float64) Stats { return Stats{N: 200, P50: p50, P99: p99} }
	// The numbers of the full run of 2026-12-03 (docs/performance.md).
	results := []SizeResult{
		{Tenants: 10, Worker: st(33, 154), Floor: st(50.8, 73), Signed: st(33, 150), SignedOverWorker: 1.014},
		{Tenants: 1000, Worker: st(34, 102), Floor: st(78, 114), Signed: st(34, 100), SignedOverWorker: 1.004, Throughput: 174, ThroughputRatio: 112},
		{Tenants: 10000, Worker: st(60, 120), Floor: st(172, 241), Signed: st(61, 120), SignedOverWorker: 1.005, PeakRSSMB: 125},
	}
	// Gitea, 2026-12-06.
	gitea := []GiteaResult{
		{Tenants: 10, Worker: st(1352, 1812), CLIPush: st(1323, 2389)},
		{Tenants: 1000, Worker: st(1332, 1944), CLIPush: st(1354, 1942), Throughput: 146},
	}
	// The ledger, 2026-12-07.
	ledger := &LedgerResult{
		Tenants: 1000,
		Latency: []LedgerLatency{
			{Server: "http-backend", IDs: 0, Worker: st(89, 0), OverEmpty: 1},
			{Server: "http-backend", IDs: 100000, Worker: st(95, 0), OverEmpty: 1.06},
			{Server: "http-backend", IDs: 1000000, Worker: st(96, 0), OverEmpty: 1.07},
			{Server: "gitea", IDs: 0, Worker: st(1182, 0), OverEmpty: 1},
			{Server: "gitea", IDs: 100000, Worker: st(1188, 0), OverEmpty: 1.01},
			{Server: "gitea", IDs: 1000000, Worker: st(1186, 0), OverEmpty: 1.00},
		},
		Revisions: []LedgerRevisions{{Server: "gitea", Messages: 1000, Changed: 500, MainRevisions: 500, LedgerRevisions: 8, Equal: true}},
		Backlog: &LedgerBacklog{Server: "gitea", Kind: "onboardings", Shards: 100, Tenants: 1000, Messages: 20000, PerSecond: 192,
			Window: 1000, FirstPerSecond: 232, LastPerSecond: 183, LastOverFirst: 0.79,
			Peers: []*PeerReplay{{Bounded: true, Records: recordsPerPush.String(), LastOverFirst: 0.71}, {Bounded: true, Records: recordsJournal.String(), LastOverFirst: 0.84}}},
	}
	// The time to live, 2026-12-05.
	live := []LiveResult{
		{Tenants: 500, Layout: LayoutArtifacts, Request: Stats{N: 20, P50: 2900, P95: 3400}},
		{Tenants: 2000, Layout: LayoutOne, Request: Stats{N: 10, P50: 98400, P95: 204400}},
		{Tenants: 2000, Layout: LayoutArtifacts, Request: Stats{N: 10, P50: 8000, P95: 72900}},
	}
	got := HeadlineTable(Headlines(run, results, gitea, ledger, live))
	for _, want := range []string{
		HeadlineHeader + "\n|---|---|---|---|---|\n",
		"| [`SendMessage` to the commit on the branch, p50](docs/performance.md#latency-backlog-and-memory) | 33 / 34 / 60 ms, 0.65x / 0.44x / 0.35x the floor's (≤1.3x: met) | 10 / 1,000 / 10,000 tenants | 2026-12-03, 2 cores | `make bench` |\n",
		"| [the same: p99, and p50's growth with size](docs/performance.md#latency-backlog-and-memory) | p99 2.11x / 0.89x / 0.50x the floor's (≤2x: **missed**); p50 at 10,000 1.82x p50 at 10 (≤1.5x: **missed**) | 10 / 1,000 / 10,000 tenants | 2026-12-03, 2 cores | `make bench` |\n",
		"| [a backlog of single onboardings, on git's server](docs/performance.md#latency-backlog-and-memory) | 174 changes/s (≥100/s: met), 112x less time a tenant than the reference's steps (≥30x: met) | 1,000 tenants |",
		"| [the worker's memory, single messages](docs/performance.md#latency-backlog-and-memory) | 125 MB peak RSS (≤150 MB: met) | 10,000 tenants |",
		"| [a worker signing every commit (ed25519), p50](docs/performance.md#commit-signing) | 1.014x / 1.004x / 1.005x the unsigned worker's (≤1.05x: met) | 10 / 1,000 / 10,000 tenants |",
		"| [the same on real Gitea, p50 against the git CLI's push](docs/performance.md#against-real-gitea) | 1,352 / 1,332 ms, 1.02x / 0.98x the CLI's (≤1.0x: **missed**); p99 0.76x / 1.00x (≤1.5x: met); backlog 146/s (≥100/s: met) | 10 / 1,000 tenants |",
		"| [p50 with a full ledger against an empty one](docs/performance.md#ledger-at-volume-issue-20) | at most 1.07x on git's http-backend (1,000,000 ids) / 1.01x on Gitea (100,000 ids) (≤1.1x: met) | 1,000 tenants, 100,000 and 1,000,000 message ids |",
		"| [new revisions of `main` for no-ops, on Gitea](docs/performance.md#ledger-at-volume-issue-20) | 500 for 500 changes of 1,000 messages (one a change, none a no-op: met); the ledger branch: 8 | 1,000 tenants |",
		"| [a backlog of 20,000 onboardings on Gitea](docs/performance.md#a-long-backlog-on-gitea) | 192/s (≥100/s: met); last 1,000 at 0.79x the first's rate (≥1: **missed**); the git CLI's constant pushes: 0.71x | 1,000 tenants before, 100 shard folders a tier |",
		"| [the new tenant's HelmRelease Ready after `SendMessage`, artifacts layout](docs/performance.md#time-to-live-in-four-layouts-issue-21) | p50 2.9 s (≤5 s: met), p95 1.2x p50 (≤2x: met) | 500 tenants, 20 samples |",
		"| p50 8.0 s (≤10 s: met), p95 9.1x p50 (≤2x: **missed**), 12.3x faster than the platform's one Kustomization (98.4 s; ≥10x: met) | 2,000 tenants, 10 samples |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the rows lack\n%s\ngot:\n%s", want, got)
		}
	}
	// One line a row, every row a command.
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n")[2:] {
		if cells := strings.Split(strings.Trim(l, "| "), " | "); len(cells) != 5 || cells[4] != "`make bench`" {
			t.Errorf("row %q: want 5 cells ending in the command", l)
		}
	}

	// Met where the numbers meet the targets; no row for what was not run.
	results[0].Worker.P99, results[2].Worker.P50 = 140, 45
	gitea[0].Worker.P50 = 1300
	ledger.Backlog.LastOverFirst, ledger.Backlog.Peers = 1.02, nil
	live[2].Request.P95 = 12000
	got = HeadlineTable(Headlines(run, results, gitea, ledger, live))
	if strings.Contains(got, "missed") {
		t.Errorf("a target met is said missed:\n%s", got)
	}
	got = HeadlineTable(Headlines(run, results[:1], nil, nil, nil))
	for _, absent := range []string{"changes/s", "peak RSS", "Gitea", "empty one", "no-ops", "HelmRelease", "p50 at 10,000"} {
		if strings.Contains(got, absent) {
			t.Errorf("a run of 10 tenants alone has a row with %q:\n%s", absent, got)
		}
	}
}

// TestRowHeaderIsTheREADMEs: the README's headline table has the header
// the bench prints, so its rows are copied, not rewritten.
func TestRowHeaderIsTheREADMEs(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\n"+HeadlineHeader+"\n") {
		t.Errorf("README.md has no table with the header %s, which make bench prints its headline rows under", HeadlineHeader)
	}
}
