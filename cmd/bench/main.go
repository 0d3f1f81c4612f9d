// Command bench measures tenant-worker against the reference platform's
// steps on a local git smart-HTTP server and fauxqs (`make bench`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/testenv/bench"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
)

func main() { os.Exit(run()) }

func run() int {
	sizes := flag.String("sizes", "10,1000,10000", "tenants already in the repository, comma-separated")
	onboard := flag.Int("onboardings", 200, "single onboardings per size")
	floorN := flag.Int("floor", 100, "floor commits per size")
	refN := flag.Int("reference", -1, "reference onboardings per size (-1: as many as -onboardings)")
	backlog := flag.Int("backlog", 1000, "messages in the backlog run")
	backlogAt := flag.Int("backlog-at", 1000, "repository size of the backlog run")
	binary := flag.String("binary", "bin/tenant-worker", "the worker binary")
	script := flag.String("reference-script", "bench/reference-onboard.sh", "the reference's steps, as a script (skipped when missing)")
	out := flag.String("out", "bench/results", "folder for the JSON results")
	onGitea := flag.Bool("gitea", true, "also measure against real Gitea (make gitea builds it)")
	giteaOnboard := flag.Int("gitea-onboardings", 100, "single onboardings per size against Gitea")
	giteaFloor := flag.Int("gitea-floor", 50, "git CLI pushes and floor commits per size against Gitea")
	giteaRef := flag.Int("gitea-reference", 20, "reference onboardings per size against Gitea")
	live := flag.Bool("live", true, "also measure the time to live on a control plane with Flux (make controlplane builds it)")
	liveSizes := flag.String("live-sizes", "10,500", "tenants installed in the cluster for the time to live, comma-separated")
	liveRequest := flag.String("live-request", "20", "onboardings per size with the reconcile request: one count for every size, or one per -live-sizes entry (\"20,5\")")
	liveInterval := flag.Int("live-interval", 20, "onboardings per size at Flux's 1-minute interval, sent at evenly spread moments of it (about a minute each)")
	kustomizeFlags := flag.String("live-kustomize-flags", "", "flags added to kustomize-controller's for the time to live, e.g. \"--concurrent-ssa=8\" (Flux's defaults when empty; the control plane has API Priority and Fairness, so Flux ignores --kube-api-qps and --kube-api-burst)")
	onLedger := flag.Bool("ledger", true, "also measure the ledger at volume (issue 20): latency with a pre-filled ledger branch, a long backlog, main's revisions for no-ops")
	ledgerTenants := flag.Int("ledger-tenants", 1000, "tenants already in the repository for the ledger at volume")
	ledgerIDs := flag.String("ledger-ids", "0,100000,1000000", "message ids in the ledger branch before the worker starts, one worker per count, comma-separated")
	ledgerOnboard := flag.Int("ledger-onboardings", 100, "single onboardings per ledger size and server (git's and Gitea)")
	ledgerBacklog := flag.Int("ledger-backlog", 20000, "onboardings waiting in the queue when a worker starts, on Gitea (git's server with -gitea=false); 0 skips it")
	ledgerBacklogDeploy := flag.Bool("ledger-backlog-deployments", false, "make the backlog per-tenant deployments of the seeded tenants (the tree changes, the repository does not grow) instead of onboardings")
	ledgerShards := flag.Int("ledger-shards", 0, "lay the backlog's repository out in this many shard folders per tier (tenant-worker layout migrate); 0 is the platform's layout")
	ledgerNoServerGC := flag.Bool("ledger-no-server-gc", false, "turn git's automatic housekeeping off on the backlog's server repository (receive.autogc false)")
	ledgerNoPeer := flag.Bool("ledger-no-peer", false, "skip the git CLI's replay of the backlog's pushes to a fresh repository (what the server alone slows down by)")
	ledgerGiteaLastCommit := flag.Bool("ledger-gitea-last-commit-cache", true, "leave Gitea's last-commit cache on (its default), which walks a branch's history on every push once it has 1,000 commits; false sets [cache.last_commit] COMMITS_COUNT out of reach")
	ledgerGiteaLanguageStats := flag.Bool("ledger-gitea-language-stats", true, "leave Gitea's language statistics on (its default), which list the default branch's whole tree after every push that moves it; false gives their queue the dummy type")
	ledgerRevisions := flag.Int("ledger-revisions", 1000, "messages, half of them no-ops, whose new main revisions are counted, per server; 0 skips it")
	liveLayouts := flag.String("live-layouts", "one,artifacts", "layouts of the time to live, comma-separated, each on a control plane of its own: one (the platform's tenants Kustomization), one-tuned (the same with kustomize-controller tuned: "+strings.Join(bench.TunedKustomizeFlags, " ")+"), tiers (a Kustomization per tier folder), shards (a Kustomization per shard folder, of the GitRepository), artifacts (a Kustomization per shard folder, from the worker's ExternalArtifact); with one and artifacts, issue 21's targets are checked and a missed one fails the run")
	helmFlags := flag.String("live-helm-flags", "", "flags added to helm-controller's for the time to live (after deploy/flux/helm-controller's, in the artifacts layout), e.g. \"--concurrent=20\"")
	liveShards := flag.Int("live-shards", 16, "shard folders per tier of the shards and artifacts layouts")
	liveReleaseInterval := flag.String("live-release-interval", "", "the tenants' HelmRelease interval for the time to live; empty, the default, keeps the tier templates' 1m0s, which the platform ships")
	liveShardInterval := flag.String("live-shard-interval", "", "interval of the Kustomizations of the tiers, shards and artifacts layouts, e.g. 10m (when empty: the tenants Kustomization's, 1m, for tiers and shards; the worker's ARTIFACT_INTERVAL default for artifacts); the timeout and retry interval stay the tenants Kustomization's")
	liveSampleTimeout := flag.Duration("live-sample-timeout", 0, "how long one sample may take before it ends its run (5m when 0)")
	only := flag.String("only", "", "run only this part: git, gitea, ledger or live")
	flag.Parse()

	if *refN < 0 {
		*refN = *onboard
	}
	lo := bench.LiveOptions{Interval: *liveInterval, Binary: *binary, KustomizeFlags: strings.Fields(*kustomizeFlags), HelmFlags: strings.Fields(*helmFlags),
		Layouts: strings.Split(*liveLayouts, ","), Shards: *liveShards, ReleaseInterval: *liveReleaseInterval, SampleTimeout: *liveSampleTimeout}
	var err error
	if *liveShardInterval != "" {
		if lo.ShardInterval, err = time.ParseDuration(*liveShardInterval); err != nil || lo.ShardInterval < time.Second {
			fmt.Fprintf(os.Stderr, "bench: -live-shard-interval %q: not an interval of 1s or more\n", *liveShardInterval)
			return 2
		}
	}
	if lo.Sizes, err = parseSizes(*liveSizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if lo.Request, err = parseSizes(*liveRequest); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -live-request:", err)
		return 2
	}
	if err := lo.Check(); err != nil && *live && (*only == "" || *only == "live") {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ledgerOpts := bench.LedgerOptions{Tenants: *ledgerTenants, Onboard: *ledgerOnboard, Backlog: *ledgerBacklog, BacklogDeployments: *ledgerBacklogDeploy, Shards: *ledgerShards, NoServerGC: *ledgerNoServerGC, NoPeer: *ledgerNoPeer,
		Revisions: *ledgerRevisions, Gitea: *onGitea, NoLastCommitCache: !*ledgerGiteaLastCommit, NoLanguageStats: !*ledgerGiteaLanguageStats, Binary: *binary}
	if ledgerOpts.IDs, err = parseSizes(*ledgerIDs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	opts := bench.Options{Onboard: *onboard, Floor: *floorN, Reference: *refN, Backlog: *backlog, BacklogAt: *backlogAt,
		Binary: *binary, RefScript: *script}
	if opts.Sizes, err = parseSizes(*sizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if _, err := os.Stat(opts.RefScript); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s not found; the reference is not measured\n", opts.RefScript)
		opts.RefScript = ""
	}
	faux, err := fauxqs.Start(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer faux.Close()
	opts.SQSEndpint = faux.Endpoint
	var results []bench.SizeResult
	if *only == "" || *only == "git" {
		results, err = bench.Run(context.Background(), opts, os.Stderr)
		fmt.Print(bench.Table(results))
	}
	var giteaResults []bench.GiteaResult
	if err == nil && *onGitea && (*only == "" || *only == "gitea") {
		g := opts
		g.Onboard, g.Floor, g.Reference = *giteaOnboard, *giteaFloor, *giteaRef
		if g.RefScript == "" {
			g.Reference = 0
		}
		giteaResults, err = bench.RunGitea(context.Background(), g, os.Stderr)
		fmt.Println()
		fmt.Print(bench.GiteaTable(giteaResults))
	}
	var ledgerResult *bench.LedgerResult
	if err == nil && *onLedger && (*only == "" || *only == "ledger") {
		ledgerOpts.SQSEndpoint = faux.Endpoint
		ledgerResult, err = bench.RunLedger(context.Background(), ledgerOpts, os.Stderr)
		fmt.Println()
		fmt.Print(bench.LedgerTable(ledgerResult))
	}
	var liveResults []bench.LiveResult
	if err == nil && *live && (*only == "" || *only == "live") {
		lo.SQSEndpoint = faux.Endpoint
		liveResults, err = bench.RunLive(context.Background(), lo, os.Stderr)
		fmt.Println()
		fmt.Print(bench.LiveTable(liveResults))
		report, terr := bench.CheckLayoutTargets(liveResults)
		fmt.Println()
		fmt.Print(report)
		if err == nil {
			err = terr
		}
	}
	// The targets docs/performance.md describes and the README cites: a
	// missed one fails the run, as a missed layout target does.
	if report, terr := bench.CheckTargets(results, giteaResults, ledgerResult); report != "" {
		fmt.Println()
		fmt.Println("targets:")
		fmt.Print(report)
		err = errors.Join(err, terr)
	}
	// The run's numbers as the README's headline rows, to be copied there
	// (the tables above are docs/performance.md's).
	info := bench.RunInfo{Date: time.Now(), Cores: runtime.NumCPU(), Command: command(os.Args[1:])}
	if rows := bench.Headlines(info, results, giteaResults, ledgerResult, liveResults); len(rows) > 0 {
		fmt.Println()
		fmt.Println("headline rows, as README.md has them:")
		fmt.Print(bench.HeadlineTable(rows))
	}
	if name, werr := bench.WriteJSON(*out, results, giteaResults, liveResults, ledgerResult); werr == nil {
		fmt.Println("results written to", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// command is the command that repeats this run, as the headline rows
// cite it: make bench without flags, else go run with them, each quoted
// for a shell where it needs it.
func command(args []string) string {
	if len(args) == 0 {
		return "make bench"
	}
	words := []string{"go run ./cmd/bench"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$`\\|&;<>()*?[]#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

func parseSizes(list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("bad size %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}
