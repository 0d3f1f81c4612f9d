package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/testenv/cputime"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitea"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// ledgerBranch is the ledger's branch, the worker's default, given to it
// explicitly.
const ledgerBranch = "tenant-worker/ledger"

// LedgerOptions shape the ledger at volume (issue 20): whether a message's
// cost grows with the message ids the ledger holds, whether a long backlog
// slows down, and whether no-ops leave the branch Flux reads alone.
type LedgerOptions struct {
	// Tenants are the premium tenants already in every repository.
	Tenants int
	// IDs are the message ids the ledger branch holds before the worker
	// starts, one repository and worker per count (0: an empty ledger).
	IDs []int
	// Onboard is the single onboardings per count and server.
	Onboard int
	// Backlog is the onboardings waiting in the queue when a worker starts,
	// on Gitea (on git's server without Gitea).
	Backlog int
	// BacklogDeployments makes the backlog per-tenant deployments of the
	// seeded tenants instead of onboardings: every message changes the
	// tree and none grows it, which tells the ledger's growth apart from
	// the layout's.
	BacklogDeployments bool
	// Shards lays the backlog's repository out in that many shard folders
	// per tier (tenant-worker layout migrate); 0 is the platform's layout.
	Shards int
	// NoServerGC turns git's automatic housekeeping off on the backlog's
	// server repository (receive.autogc false): receive-pack no longer
	// runs `git gc --auto`, whose repacks grow with the repository.
	NoServerGC bool
	// NoPeer skips the git command line's replay of the backlog's pushes
	// (PeerReplay).
	NoPeer bool
	// Revisions is the messages sent to count main's new revisions, half of
	// them no-ops.
	Revisions int
	// Gitea also measures against real Gitea (make gitea builds it).
	Gitea bool
	// NoLastCommitCache runs Gitea with its last-commit cache off (see
	// noLastCommitCache).
	NoLastCommitCache bool
	// NoLanguageStats runs Gitea without its language statistics (see
	// noLanguageStats).
	NoLanguageStats bool
	Binary          string
	SQSEndpoint     string
	WorkDir         string
}

// noLastCommitCache turns off Gitea's last-commit cache, which, on
// every push to a branch of 1,000 commits or more, walks the branch's
// history back until it finds the last commit of each entry of the root
// folder (an entry unchanged since the first commit: the whole history).
const noLastCommitCache = "\n[cache.last_commit]\nCOMMITS_COUNT = 9223372036854775807\n"

// noLanguageStats turns off Gitea's language statistics: on every push that
// moves the default branch, Gitea queues them, and they list the whole tree
// of the branch and ask `git check-attr` about each file, in the
// background, a cost that follows the number of files. A dummy queue drops
// the requests.
const noLanguageStats = "\n[queue.repo_stats_update]\nTYPE = dummy\n"

// LedgerLatency is the single-message latency with a ledger of IDs message
// ids, on one server.
type LedgerLatency struct {
	Server string `json:"server"`
	IDs    int    `json:"ledger_message_ids"`
	Worker Stats  `json:"worker_latency"`
	// OverEmpty is Worker.P50 over the p50 of the smallest ledger measured
	// on the same server, in the same minutes (target: at most 1.1).
	OverEmpty float64 `json:"p50_over_empty_ledger_p50"`
	// FillSeconds is how long building and pushing the ledger took.
	FillSeconds float64 `json:"fill_seconds"`
	PeakRSSMB   float64 `json:"worker_peak_rss_mb"`
}

// LedgerBacklog is a backlog of onboardings waiting in the queue when the
// worker starts, timed from its first consumer's start to each
// onboarding's "tenant change pushed".
type LedgerBacklog struct {
	Server string `json:"server"`
	// Kind is onboardings (the repository grows by each) or per-tenant
	// deployments of the seeded tenants (it does not).
	Kind      string  `json:"kind"`
	Shards    int     `json:"shards_per_tier"`
	Tenants   int     `json:"tenants_before"`
	Messages  int     `json:"onboardings"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"messages_per_second"`
	Window    int     `json:"window"`
	// FirstPerSecond and LastPerSecond are the rates of the first and the
	// last Window onboardings; zero when Window is less than a batch
	// (its messages pushed together).
	FirstPerSecond float64 `json:"first_window_per_second"`
	LastPerSecond  float64 `json:"last_window_per_second"`
	LastOverFirst  float64 `json:"last_over_first"`
	// Redelivered is how many deliveries the worker found already applied
	// (SQS gave a message again): they are not counted in the rates.
	Redelivered int     `json:"redelivered"`
	PeakRSSMB   float64 `json:"worker_peak_rss_mb"`
	// ServerGC is whether receive-pack ran git's automatic housekeeping;
	// ServerObjects is `git count-objects -v` of the server repository
	// after the backlog.
	ServerGC      bool              `json:"server_autogc"`
	ServerObjects map[string]string `json:"server_objects,omitempty"`
	// NoLastCommitCache: Gitea ran with its last-commit cache off
	// (noLastCommitCache).
	NoLastCommitCache bool `json:"gitea_last_commit_cache_off,omitempty"`
	// NoLanguageStats: Gitea ran without its language statistics
	// (noLanguageStats).
	NoLanguageStats bool `json:"gitea_language_stats_off,omitempty"`
	// WorkerCPU and ServerCPU are the CPU milliseconds a message, in the
	// second and the last window, of the worker's process and of the
	// server's (Gitea and the git processes it runs; for http-backend,
	// the git processes the bench's own server runs). Two cores are
	// shared: what the server spends more at the end is taken from the
	// worker's steps.
	WorkerCPU [2]float64 `json:"worker_cpu_ms_per_message_second_last"`
	ServerCPU [2]float64 `json:"server_cpu_ms_per_message_second_last"`
	// Peers are the git command line pushing the worker's history again,
	// as it was and squashed to a commit per push (none when
	// LedgerOptions.NoPeer).
	Peers []*PeerReplay `json:"git_cli_replays,omitempty"`
}

// LedgerRevisions is the new revisions of main and of the ledger branch
// (git rev-list --count on the server, before and after) for Messages
// messages of which NoOps change nothing.
type LedgerRevisions struct {
	Server   string `json:"server"`
	Messages int    `json:"messages"`
	NoOps    int    `json:"no_ops_sent"`
	// Repeats are onboardings sent a second time under a new message id,
	// Absent offboardings of tenants that do not exist: NoOps in all.
	Repeats int `json:"repeated_onboardings"`
	Absent  int `json:"offboardings_of_absent_tenants"`
	// Changed is the messages the worker reports as changing the tree
	// ("tenant change pushed"); NoOpOutcomes the others.
	Changed      int `json:"changed_the_tree"`
	NoOpOutcomes int `json:"no_op_outcomes"`
	// MainRevisions and LedgerRevisions are the commits the two branches
	// gained.
	MainRevisions   int `json:"new_main_revisions"`
	LedgerRevisions int `json:"new_ledger_revisions"`
	// Equal: main gained one revision per message that changed the tree,
	// and that is every message but the no-ops.
	Equal bool `json:"equal"`
}

// LedgerResult is the ledger at volume.
type LedgerResult struct {
	Tenants   int               `json:"tenants"`
	Latency   []LedgerLatency   `json:"latency"`
	Backlog   *LedgerBacklog    `json:"backlog,omitempty"`
	Revisions []LedgerRevisions `json:"main_revisions"`
}

// ledgerHost is a git server the ledger is measured on.
type ledgerHost struct {
	name string
	srv  repoCreator
	repo func(kind string) string // a repository's name on the server
	url  func(name string) string // its URL for the worker and gitrepo
	path func(name string) string // its bare repository on disk
	// pushURL is its URL for the git command line, credentials in it.
	pushURL func(name string) string
	token   string
	env     []string // the worker's credentials
	// cpu is the CPU time the server has spent so far.
	cpu func() time.Duration
}

func (h ledgerHost) start(o LedgerOptions, name string, queues []string) (*worker, error) {
	env := append(slices.Clone(h.env), "GIT_LEDGER_BRANCH="+ledgerBranch)
	return startWorker(o.Binary, h.url(name), o.SQSEndpoint, queues, env...)
}

// RunLedger measures the ledger at volume: on git's smart-HTTP server and
// on Gitea, the single-message latency with each ledger of o.IDs and the
// main revisions of o.Revisions messages, half of them no-ops; then, on
// Gitea, the backlog.
func RunLedger(ctx context.Context, o LedgerOptions, progress io.Writer) (*LedgerResult, error) {
	res := &LedgerResult{Tenants: o.Tenants}
	api := fauxqs.Client(o.SQSEndpoint)
	files := map[int]map[string][]byte{} // each ledger built once, pushed to each server
	fill := func(n int) map[string][]byte {
		if files[n] == nil {
			files[n] = ledgerFiles(n, time.Now())
		}
		return files[n]
	}

	dir, err := os.MkdirTemp(o.WorkDir, "ledger-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	// One server at a time: git's, then Gitea, which also takes the
	// backlog (git's does without Gitea).
	measure := func(h ledgerHost, backlog bool) error {
		if o.Onboard > 0 && len(o.IDs) > 0 {
			lat, err := ledgerLatency(ctx, o, api, h, fill, progress)
			res.Latency = append(res.Latency, lat...)
			if err != nil {
				return fmt.Errorf("ledger latency on %s: %w", h.name, err)
			}
		}
		if o.Revisions > 0 {
			rev, err := ledgerRevisions(ctx, o, api, h, progress)
			if err != nil {
				return fmt.Errorf("main revisions on %s: %w", h.name, err)
			}
			res.Revisions = append(res.Revisions, rev)
		}
		if backlog && o.Backlog > 0 {
			clear(files) // no longer needed: free them for the backlog
			b, err := ledgerBacklog(ctx, o, api, h, progress)
			if err != nil {
				return fmt.Errorf("backlog on %s: %w", h.name, err)
			}
			res.Backlog = b
		}
		return nil
	}

	srv, err := gitserver.Start(dir+"/git", "127.0.0.1:0", "")
	if err != nil {
		return res, err
	}
	err = measure(ledgerHost{name: "http-backend", srv: srv, repo: func(k string) string { return k + ".git" },
		url: srv.RepoURL, path: srv.RepoPath, pushURL: srv.RepoURL, cpu: cputime.WaitedChildren}, !o.Gitea)
	_ = srv.Close()
	if err != nil || !o.Gitea {
		return res, err
	}

	if err := os.Mkdir(dir+"/gitea", 0o755); err != nil {
		return res, err
	}
	var opts gitea.Options
	if o.NoLastCommitCache {
		opts.INI += noLastCommitCache
	}
	if o.NoLanguageStats {
		opts.INI += noLanguageStats
	}
	g, err := gitea.StartWith(dir+"/gitea", opts)
	if err != nil {
		return res, err
	}
	defer g.Close()
	err = measure(ledgerHost{name: "gitea", srv: g, repo: func(k string) string { return k },
		url: g.DirectURL, path: g.RepoPath, pushURL: g.CredentialURL, token: g.Token,
		env: []string{"GIT_USERNAME=" + gitea.Owner, "GIT_TOKEN=" + g.Token},
		cpu: func() time.Duration { return processCPU(g.Pid()) }}, true)
	return res, err
}

// ledgerFiles is a ledger holding n message ids (random UUIDs, as SQS's),
// sent at moments spread evenly at random over the 24 hours before now
// (well inside the queues' retention, 4 days by default, so nothing of it
// is pruned), as ledger.Changes gives it: the tree of the ledger branch.
func ledgerFiles(n int, now time.Time) map[string][]byte {
	l := ledger.Open(nil)
	rng := rand.New(rand.NewPCG(uint64(n), 20))
	day := int64(24 * time.Hour / time.Millisecond)
	end := now.UnixMilli()
	for range n {
		a, b := rng.Uint64(), rng.Uint64()
		a = a&^0xf000 | 0x4000     // version 4
		b = b&^(0xc<<60) | 0x8<<60 // variant
		id := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
		l.Note(id, end-rng.Int64N(day))
	}
	// Under the GitOps root's folder, where the worker keeps that root's
	// records.
	c := map[string][]byte{}
	for p, b := range l.Changes() {
		c[path.Join(templates.Root, p)] = b
	}
	c["README"] = []byte("Written by tenant-worker's benchmark: a ledger holding " + strconv.Itoa(n) +
		" message ids sent in the 24 hours before it was made.\n")
	return c
}

// PrefillLedger makes files the ledger branch of the repository at url, a
// commit with no parent, pushed with main left where it is (the branch did
// not exist); n names the ids it holds in the commit's message.
func PrefillLedger(ctx context.Context, url, token string, files map[string][]byte, n int) error {
	repo, err := gitrepo.Open(ctx, gitrepo.Options{URL: url, Branch: "main", LedgerBranch: ledgerBranch, Token: token,
		AuthorName: "bench", AuthorEmail: "bench@example.com", Timeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	if !repo.LedgerHead().IsZero() {
		return fmt.Errorf("%s already has a ledger branch", url)
	}
	head := repo.Head()
	c, err := repo.Commit(plumbing.ZeroHash, files, fmt.Sprintf("Bench: a ledger of %d message ids\n", n))
	if err != nil {
		return err
	}
	return repo.PushRefs(ctx, gitrepo.Move{Old: head, New: head}, gitrepo.Move{New: c})
}

// ledgerQueues makes the three queues of one worker.
func ledgerQueues(ctx context.Context, api *sqs.Client, label string) ([]string, error) {
	var qs []string
	for _, kind := range []string{"onboarding", "offboarding", "deployment"} {
		q, _, err := fauxqs.CreateQueue(ctx, api, fmt.Sprintf("bench-ledger-%s-%d-%s", label, time.Now().UnixNano()%1e9, kind), fauxqs.QueueOptions{})
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// sendAll sends bodies to queue, ten to a call.
func sendAll(ctx context.Context, api *sqs.Client, queue string, bodies []string) error {
	for i := 0; i < len(bodies); i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, len(bodies)); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(bodies[j])})
		}
		out, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send: %d of %d failed: %s", len(out.Failed), len(entries), aws.ToString(out.Failed[0].Message))
		}
	}
	return nil
}

// waitOutcomes waits until w logged n outcomes, at most timeout.
func waitOutcomes(w *worker, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for w.count(outcomes...) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d messages handled in %s\n%s", w.count(outcomes...), n, timeout, w.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// ledgerLatency measures single onboardings on host h with a ledger of
// each size of o.IDs: one repository of o.Tenants premium tenants and one
// worker per size, the ledger branch built and pushed before the worker
// starts; the sizes interleaved (the i-th onboarding of each follow each
// other, which goes first rotating), each timed from SendMessage to the
// branch moving, as Run's are.
func ledgerLatency(ctx context.Context, o LedgerOptions, api *sqs.Client, h ledgerHost, fill func(int) map[string][]byte,
	progress io.Writer) ([]LedgerLatency, error) {
	type side struct {
		res   LedgerLatency
		w     *worker
		queue string
		watch refWatcher
	}
	var sides []*side
	defer func() {
		for _, s := range sides {
			s.w.stop()
		}
	}()
	results := func() []LedgerLatency {
		var out []LedgerLatency
		for _, s := range sides {
			out = append(out, s.res)
		}
		return out
	}
	for _, n := range o.IDs {
		name := h.repo(fmt.Sprintf("ledger-ids-%d", n))
		fmt.Fprintf(progress, "bench (ledger, %s): %d tenants, a ledger branch of %d message ids, starting its worker\n", h.name, o.Tenants, n)
		if err := seedRepo(h.srv, name, o.Tenants); err != nil {
			return results(), fmt.Errorf("seed %s: %w", name, err)
		}
		start := time.Now()
		if err := PrefillLedger(ctx, h.url(name), h.token, fill(n), n); err != nil {
			return results(), fmt.Errorf("pre-fill the ledger of %s: %w", name, err)
		}
		s := &side{res: LedgerLatency{Server: h.name, IDs: n, FillSeconds: time.Since(start).Seconds()}, watch: refWatcher{dir: h.path(name)}}
		queues, err := ledgerQueues(ctx, api, strconv.Itoa(n))
		if err != nil {
			return results(), err
		}
		s.queue = queues[0]
		if s.w, err = h.start(o, name, queues); err != nil {
			return results(), err
		}
		sides = append(sides, s)
	}
	fmt.Fprintf(progress, "bench (ledger, %s): %d single onboardings per ledger\n", h.name, o.Onboard)
	ds := make([][]time.Duration, len(sides))
	for i := range o.Onboard {
		for k := range sides {
			j := (i + k) % len(sides)
			s := sides[j]
			old := s.watch.head()
			body := fmt.Sprintf(`{"tenant_id":"bench-%d","tenant_tier":"premium","release_version":"0.0"}`, i)
			start := time.Now()
			if _, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.queue), MessageBody: aws.String(body)}); err != nil {
				return results(), err
			}
			if _, err := s.watch.waitMove(old, 60*time.Second); err != nil {
				return results(), fmt.Errorf("onboarding %d with %d ids: %w\n%s", i, s.res.IDs, err, s.w.tail())
			}
			ds[j] = append(ds[j], time.Since(start))
			time.Sleep(settle)
		}
	}
	base := sides[0]
	for _, s := range sides {
		if s.res.IDs < base.res.IDs {
			base = s
		}
	}
	for j, s := range sides {
		s.res.Worker = stats(ds[j])
		s.res.PeakRSSMB = peakRSS(s.w.cmd.Process.Pid)
	}
	for _, s := range sides {
		s.res.OverEmpty = s.res.Worker.P50 / base.res.Worker.P50
	}
	return results(), nil
}

// ledgerRevisions sends o.Revisions messages at once to a new worker on
// host h: half onboardings of new tenants, the other half no-ops (half of
// those the same onboardings again, under new message ids, the rest
// offboardings of tenants that do not exist), and counts the revisions
// main and the ledger branch gained on the server.
func ledgerRevisions(ctx context.Context, o LedgerOptions, api *sqs.Client, h ledgerHost, progress io.Writer) (LedgerRevisions, error) {
	n := o.Revisions
	r := LedgerRevisions{Server: h.name, Messages: n, NoOps: n / 2}
	changes := n - r.NoOps
	r.Repeats = min(r.NoOps/2, changes)
	r.Absent = r.NoOps - r.Repeats
	fmt.Fprintf(progress, "bench (ledger, %s): %d messages, %d of them no-ops (%d repeated onboardings, %d offboardings of absent tenants)\n",
		h.name, n, r.NoOps, r.Repeats, r.Absent)
	name := h.repo("ledger-revisions")
	if err := seedRepo(h.srv, name, o.Tenants); err != nil {
		return r, fmt.Errorf("seed %s: %w", name, err)
	}
	queues, err := ledgerQueues(ctx, api, "revisions")
	if err != nil {
		return r, err
	}
	w, err := h.start(o, name, queues)
	if err != nil {
		return r, err
	}
	defer w.stop()
	count := func(ref string) (int, error) {
		out, err := gitserver.OutputIn(h.path(name), "rev-list", "--count", ref)
		if err != nil {
			if _, verr := gitserver.OutputIn(h.path(name), "rev-parse", "--verify", "-q", ref); verr != nil {
				return 0, nil // the ref does not exist (yet)
			}
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(out))
	}
	mainBefore, err := count("refs/heads/main")
	if err != nil {
		return r, err
	}
	ledgerBefore, err := count("refs/heads/" + ledgerBranch)
	if err != nil {
		return r, err
	}

	var onboard, offboard []string
	for i := range changes {
		onboard = append(onboard, fmt.Sprintf(`{"tenant_id":"rev-%d","tenant_tier":"premium","release_version":"0.0"}`, i))
	}
	for i := range r.Repeats {
		onboard = append(onboard, fmt.Sprintf(`{"tenant_id":"rev-%d","tenant_tier":"premium","release_version":"0.0"}`, i))
	}
	for i := range r.Absent {
		offboard = append(offboard, fmt.Sprintf(`{"tenant_id":"ghost-%d","tenant_tier":"premium"}`, i))
	}
	// Both queues at once, in tens, as a burst arrives.
	for i := 0; i < max(len(onboard), len(offboard)); i += 10 {
		if i < len(onboard) {
			if err := sendAll(ctx, api, queues[0], onboard[i:min(i+10, len(onboard))]); err != nil {
				return r, err
			}
		}
		if i < len(offboard) {
			if err := sendAll(ctx, api, queues[1], offboard[i:min(i+10, len(offboard))]); err != nil {
				return r, err
			}
		}
	}
	if err := waitOutcomes(w, n, 5*time.Minute+time.Duration(n)*50*time.Millisecond); err != nil {
		return r, err
	}
	r.Changed = w.count(logApplied)
	r.NoOpOutcomes = w.count(outcomes...) - r.Changed
	mainAfter, err := count("refs/heads/main")
	if err != nil {
		return r, err
	}
	ledgerAfter, err := count("refs/heads/" + ledgerBranch)
	if err != nil {
		return r, err
	}
	r.MainRevisions, r.LedgerRevisions = mainAfter-mainBefore, ledgerAfter-ledgerBefore
	r.Equal = r.MainRevisions == r.Changed && r.Changed == changes
	if rejected := w.count(logRejected); rejected > 0 {
		return r, fmt.Errorf("%d messages rejected\n%s", rejected, w.tail())
	}
	return r, nil
}

// backlogTiers take the backlog's onboardings in turn, so that no tier's
// folder grows by more than a third of it.
var backlogTiers = []string{"premium", "basic", "advanced"}

// ledgerBacklog puts o.Backlog onboardings in the queue of a new worker on
// host h before it starts, then times them: overall from its first
// consumer's start to the last "tenant change pushed", and the first and
// the last window of them (1,000, or a fifth of a smaller backlog).
func ledgerBacklog(ctx context.Context, o LedgerOptions, api *sqs.Client, h ledgerHost, progress io.Writer) (*LedgerBacklog, error) {
	n := o.Backlog
	b := &LedgerBacklog{Server: h.name, Tenants: o.Tenants, Messages: n, Window: max(1, min(1000, n/5)), Kind: "onboardings", Shards: o.Shards}
	fmt.Fprintf(progress, "bench (ledger, %s): a backlog of %d onboardings at %d tenants, %d shard folders per tier\n", h.name, n, o.Tenants, o.Shards)
	name := h.repo("ledger-backlog")
	if err := seedRepoLaid(h.srv, name, o.Tenants, gitops.Layout{Shards: o.Shards}); err != nil {
		return b, fmt.Errorf("seed %s: %w", name, err)
	}
	b.ServerGC = !o.NoServerGC
	b.NoLastCommitCache = h.name == "gitea" && o.NoLastCommitCache
	b.NoLanguageStats = h.name == "gitea" && o.NoLanguageStats
	if o.NoServerGC {
		if err := gitserver.Git(h.path(name), "config", "receive.autogc", "false"); err != nil {
			return b, err
		}
	}
	queues, err := ledgerQueues(ctx, api, "backlog")
	if err != nil {
		return b, err
	}
	bodies := make([]string, n)
	queue := queues[0]
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"tenant_id":"backlog-%d","tenant_tier":%q,"release_version":"0.0"}`, i, backlogTiers[i%len(backlogTiers)])
		if o.BacklogDeployments {
			// A deployment of one seeded tenant each, each to a release it
			// is not at: every message changes the tree, none grows it.
			bodies[i] = fmt.Sprintf(`{"tenant_id":"seed-%d","tenant_tier":"premium","release_version":"%d.0"}`, i%o.Tenants+1, i/o.Tenants+1)
		}
	}
	if o.BacklogDeployments {
		b.Kind, queue = "per-tenant deployments", queues[2]
	}
	if err := sendAll(ctx, api, queue, bodies); err != nil {
		return b, err
	}
	seed, err := gitserver.OutputIn(h.path(name), "rev-parse", "main")
	if err != nil {
		return b, err
	}
	w, err := h.start(o, name, queues)
	if err != nil {
		return b, err
	}
	defer w.stop()
	deadline := time.Now().Add(10*time.Minute + time.Duration(n)*30*time.Millisecond)
	last, moved := -1, time.Now()
	var cpu []cpuSample
	for {
		sample := cpuSample{at: time.Now(), worker: processCPU(w.cmd.Process.Pid)}
		if h.cpu != nil {
			sample.server = h.cpu()
		}
		cpu = append(cpu, sample)
		if w.count(logApplied) >= n {
			break
		}
		if c := w.count(logApplied); c != last {
			last, moved = c, time.Now()
		} else if time.Since(moved) > 2*time.Minute {
			return b, fmt.Errorf("%d of %d applied, none for 2 minutes\n%s", c, n, w.tail())
		}
		if w.count(logRejected) > 0 {
			return b, fmt.Errorf("an onboarding was rejected\n%s", w.tail())
		}
		if time.Now().After(deadline) {
			return b, fmt.Errorf("%d of %d applied by %s\n%s", w.count(logApplied), n, deadline.Format(time.TimeOnly), w.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.PeakRSSMB = peakRSS(w.cmd.Process.Pid)
	if out, err := gitserver.OutputIn(h.path(name), "count-objects", "-v"); err == nil {
		b.ServerObjects = map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok {
				b.ServerObjects[k] = v
			}
		}
	}
	start := w.times(logConsuming)[0]
	done := w.times(logApplied)[:n]
	b.Redelivered = w.count(logRedelivered)
	b.Seconds = done[n-1].Sub(start).Seconds()
	b.PerSecond = float64(n) / b.Seconds
	if k := b.Window; k >= maxBatch() && n > k {
		b.FirstPerSecond = float64(k) / done[k-1].Sub(start).Seconds()
		b.LastPerSecond = float64(k) / done[n-1].Sub(done[n-1-k]).Seconds()
		b.LastOverFirst = b.LastPerSecond / b.FirstPerSecond
		// CPU from one window's end to the next's, the second window and
		// the last: each holds the end of the push before it (the server
		// reaps its git processes after answering), the server's work
		// after that push, and the next batch whole, where the first
		// window holds the worker's start and no push's end.
		if n >= 2*k {
			for i, win := range [][2]time.Time{{done[k-1], done[2*k-1]}, {done[n-1-k], done[n-1]}} {
				from, to := cpuAt(cpu, win[0]), cpuAt(cpu, win[1])
				b.WorkerCPU[i] = float64((to.worker - from.worker).Milliseconds()) / float64(k)
				b.ServerCPU[i] = float64((to.server - from.server).Milliseconds()) / float64(k)
			}
		}
	} else {
		fmt.Fprintf(progress, "bench (ledger, %s): a window of %d is less than a batch (MAX_BATCH %d): no first and last rates\n", h.name, k, maxBatch())
	}
	if !o.NoPeer && !o.BacklogDeployments && b.FirstPerSecond > 0 {
		w.stop() // nothing of the worker runs beside the replay
		for _, how := range []replay{replayAsIs, replaySquashed, replayLedgerAsFile} {
			p, err := replayPushes(h, name, strings.TrimSpace(seed), maxBatch(), b.Window, how, progress)
			if err != nil {
				return b, fmt.Errorf("the git CLI's replay (%s): %w", how, err)
			}
			b.Peers = append(b.Peers, p)
		}
		for _, records := range []recordLayout{recordsPerPush, recordsIn16s, recordsIn256s, recordsJournal} {
			p, err := boundedPushes(h, name, strings.TrimSpace(seed), n, maxBatch(), b.Window, records, progress)
			if err != nil {
				return b, fmt.Errorf("the git CLI's pushes of the same size (records: %s): %w", records, err)
			}
			b.Peers = append(b.Peers, p)
		}
	}
	return b, nil
}

// cpuSample is the CPU time the worker and the server had spent at a
// moment of the backlog.
type cpuSample struct {
	at             time.Time
	worker, server time.Duration
}

// cpuAt is the last sample taken at or before t (the first if none was).
func cpuAt(samples []cpuSample, t time.Time) cpuSample {
	// The first sample taken after t, and the one before it.
	i, _ := slices.BinarySearchFunc(samples, t, func(s cpuSample, t time.Time) int {
		if s.at.After(t) {
			return 1
		}
		return -1
	})
	return samples[max(0, i-1)]
}

// processCPU is the processor time process pid and the children it waited
// for have spent; zero when it cannot be read.
func processCPU(pid int) time.Duration {
	t, err := cputime.Of(pid)
	if err != nil {
		return 0
	}
	return t.Self + t.Children
}

// maxBatch is the workers' batch: BENCH_WORKER_ENV's settings, or their
// defaults, read by the worker's own configuration, as the worker gets
// them (the last of a repeated key; an empty value is unset).
func maxBatch() int {
	cmd := exec.Command("true")
	cmd.Env = strings.Fields(os.Getenv("BENCH_WORKER_ENV"))
	env := map[string]string{}
	for _, kv := range cmd.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	o := config.Default()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindGroups(fs, func(k string) string { return env[k] }, config.Worker)
	return o.Batch()
}

// LedgerTable renders the ledger at volume: the latency per ledger size,
// the main revisions, the backlog.
func LedgerTable(r *LedgerResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "| server (%d tenants) | ledger ids | worker p50 | p95 | p99 | p50 / empty ledger p50 | ≤1.1x | RSS MB | ledger built and pushed |\n", r.Tenants)
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---|---:|---:|\n")
		for _, l := range r.Latency {
			fmt.Fprintf(&b, "| %s | %d | %.0f ms | %.0f ms | %.0f ms | %.2fx | %s | %.0f | %.1f s |\n", l.Server, l.IDs,
				l.Worker.P50, l.Worker.P95, l.Worker.P99, l.OverEmpty, yes(l.OverEmpty <= 1.1), l.PeakRSSMB, l.FillSeconds)
		}
	}
	if len(r.Revisions) > 0 {
		b.WriteString("\n")
		fmt.Fprintf(&b, "| server | messages | no-ops sent (repeated onboardings + offboardings of absent tenants) | changed the tree (worker) | new main revisions | equal | new ledger revisions |\n")
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---|---:|\n")
		for _, v := range r.Revisions {
			fmt.Fprintf(&b, "| %s | %d | %d (%d + %d) | %d | %d | %s | %d |\n", v.Server, v.Messages, v.NoOps, v.Repeats, v.Absent,
				v.Changed, v.MainRevisions, yes(v.Equal), v.LedgerRevisions)
		}
	}
	if l := r.Backlog; l != nil {
		b.WriteString("\n")
		fmt.Fprintf(&b, "| backlog (server, layout) | tenants before | messages | seconds | messages/s | ≥100/s | first %d /s | last %d /s | last/first | ≥1 | redelivered | RSS MB |\n", l.Window, l.Window)
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|\n")
		first, last, ratio, ok := "-", "-", "-", "-"
		if l.FirstPerSecond > 0 {
			first, last = fmt.Sprintf("%.0f", l.FirstPerSecond), fmt.Sprintf("%.0f", l.LastPerSecond)
			ratio, ok = fmt.Sprintf("%.2f", l.LastOverFirst), yes(l.LastOverFirst >= 1)
		}
		layout := "tier folders"
		if l.Shards > 0 {
			layout = fmt.Sprintf("%d shards per tier", l.Shards)
		}
		if !l.ServerGC {
			layout += ", receive.autogc off"
		}
		if l.NoLastCommitCache {
			layout += ", last-commit cache off"
		}
		if l.NoLanguageStats {
			layout += ", language stats off"
		}
		fmt.Fprintf(&b, "| %s, %s | %d | %d %s | %.1f | %.0f | %s | %s | %s | %s | %s | %d | %.0f |\n", l.Server, layout, l.Tenants, l.Messages, l.Kind,
			l.Seconds, l.PerSecond, yes(l.PerSecond >= 100), first, last, ratio, ok, l.Redelivered, l.PeakRSSMB)
	}
	if l := r.Backlog; l != nil {
		for _, p := range l.Peers {
			what := "the git CLI pushing the worker's commits again"
			switch {
			case p.Squashed:
				what = "the same trees, one commit per push and branch"
			case p.LedgerAsFile:
				what = "the worker's commits of the branch again, its ledger replaced by a file a push"
			case p.Bounded:
				what = "the git CLI adding as many tenants, the same every push, the ledger's records in " + p.Records
			}
			fmt.Fprintf(&b, "| %s, %d pushes, no worker running | %d | %d | %.1f | %.0f | %s | %.0f | %.0f | %.2f | %s | - | - |\n",
				what, p.Pushes, l.Tenants, l.Messages, p.Seconds, p.PerSecond, yes(p.PerSecond >= 100), p.FirstPerSecond, p.LastPerSecond, p.LastOverFirst, yes(p.LastOverFirst >= 1))
		}
		for _, p := range l.Peers {
			what := fmt.Sprintf("the git CLI's replay (squashed: %v)", p.Squashed)
			if p.LedgerAsFile {
				what = "the git CLI's replay, the ledger a file a push"
			}
			if p.Bounded {
				what = "the git CLI's pushes of the same tenants and records, records in " + p.Records
			}
			fmt.Fprintf(&b, "\n%s, per push, first window / last: %.0f / %.0f ms, of which git's client writing the pack %.0f / %.0f ms (timed apart), a pack of %.0f / %.0f KB",
				what, p.PushFirstMS, p.PushLastMS, p.PackFirstMS, p.PackLastMS, p.PackFirstKB, p.PackLastKB)
			if p.ServerCPU[0] > 0 {
				fmt.Fprintf(&b, "; the server's CPU a message, second window / last: %.2f / %.2f ms (%.2fx)", p.ServerCPU[0], p.ServerCPU[1], ratioOf(p.ServerCPU))
			}
		}
		if len(l.Peers) > 0 {
			b.WriteString("\n")
		}
	}
	if l := r.Backlog; l != nil {
		// The same server slowing down under a client whose pushes do not
		// grow: the floor any client's last/first meets on it.
		for _, p := range l.Peers {
			if p.Bounded && p.Records == recordsPerPush.String() && l.FirstPerSecond > 0 {
				fmt.Fprintf(&b, "\nthe worker's last/first against the git CLI's pushing the same content every time, in the same run: %.2f against %.2f: at least the same: %s\n",
					l.LastOverFirst, p.LastOverFirst, yes(l.LastOverFirst >= p.LastOverFirst))
			}
		}
	}
	if l := r.Backlog; l != nil {
		// The ledger's part of the server's slowing down: the same branch
		// pushed with the worker's ledger and with a file a push.
		var asIs, asFile *PeerReplay
		for _, p := range l.Peers {
			switch {
			case p.Bounded || p.Squashed:
			case p.LedgerAsFile:
				asFile = p
			default:
				asIs = p
			}
		}
		if asIs != nil && asFile != nil {
			fmt.Fprintf(&b, "\nthe worker's commits replayed with its ledger against with a file a push instead, in the same run: last/first %.2f against %.2f; a push's pack %.0f / %.0f KB against %.0f / %.0f KB (first window / last)",
				asIs.LastOverFirst, asFile.LastOverFirst, asIs.PackFirstKB, asIs.PackLastKB, asFile.PackFirstKB, asFile.PackLastKB)
			if asIs.ServerCPU[0] > 0 && asFile.ServerCPU[0] > 0 {
				fmt.Fprintf(&b, "; the server's CPU a message %.2f / %.2f ms against %.2f / %.2f ms (second window / last)",
					asIs.ServerCPU[0], asIs.ServerCPU[1], asFile.ServerCPU[0], asFile.ServerCPU[1])
			}
			b.WriteString("\n")
		}
	}
	if l := r.Backlog; l != nil && l.FirstPerSecond > 0 {
		fmt.Fprintf(&b, "\nCPU a message, second window / last: the worker %.2f / %.2f ms (%.2fx), the server %.2f / %.2f ms (%.2fx)\n",
			l.WorkerCPU[0], l.WorkerCPU[1], ratioOf(l.WorkerCPU), l.ServerCPU[0], l.ServerCPU[1], ratioOf(l.ServerCPU))
	}
	if l := r.Backlog; l != nil && l.ServerObjects != nil {
		fmt.Fprintf(&b, "\nserver repository after the backlog: %s loose objects, %s packs (%s KiB packed)\n",
			l.ServerObjects["count"], l.ServerObjects["packs"], l.ServerObjects["size-pack"])
	}
	return b.String()
}

// ratioOf is last over first, 0 when first is.
func ratioOf(v [2]float64) float64 {
	if v[0] == 0 {
		return 0
	}
	return v[1] / v[0]
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
