package bench

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// PeerReplay is the git command line pushing again, to a fresh repository on
// the same server, the history the worker pushed during the backlog: the
// same commits, trees and refs, one push per MAX_BATCH messages of the
// branch, each with the ledger branch at the matching point, atomically.
// The server does the same work for it as for the worker, and nothing of
// the worker runs: how much its last window is slower than its first is
// what the server (and git's own client) slow down by as the repository
// grows. The pushes are not thin (--no-thin): like the worker's, every
// delta's base is in the pack, so the server never reads a base out of its
// own packs (git's default thin packs make it, a cost that grows with the
// repository and that the worker does not cause). PackFirstMS and
// PackLastMS are the client's share: the mean time, in the first and the
// last window, for git to write a push's pack (pack-objects, as push
// does), measured apart before each push.
//
// Squashed replays the same trees with one commit per push on each branch
// instead of one per message: what the server's work per push would be
// for a client that made a batch one commit.
//
// LedgerAsFile replays the branch's commits as they are and puts, in
// place of the worker's ledger, one commit a push that adds one file of
// the push's records and one of its message ids (as many lines as the
// worker's ledger records, of the same form): what the server's work
// would be with a ledger whose cost a push does not grow, beside the same
// branch. Against the plain replay, in the same run, it is the part of
// the server's slowing down that the ledger's layout causes.
type PeerReplay struct {
	Squashed     bool `json:"squashed"`
	LedgerAsFile bool `json:"ledger_as_file,omitempty"`
	// Bounded: not the worker's history but boundedPushes', made to carry
	// the same at every push.
	Bounded bool `json:"bounded_synthetic,omitempty"`
	// Records is where boundedPushes put the ledger's records.
	Records     string  `json:"bounded_records,omitempty"`
	Pushes      int     `json:"pushes"`
	PushFirstMS float64 `json:"push_first_window_ms"`
	PushLastMS  float64 `json:"push_last_window_ms"`
	PackFirstMS float64 `json:"pack_first_window_ms"`
	PackLastMS  float64 `json:"pack_last_window_ms"`
	// PackFirstKB and PackLastKB are the mean size of a push's pack in
	// the first and the last window.
	PackFirstKB    float64 `json:"pack_first_window_kb"`
	PackLastKB     float64 `json:"pack_last_window_kb"`
	Seconds        float64 `json:"seconds"`
	PerSecond      float64 `json:"messages_per_second"`
	FirstPerSecond float64 `json:"first_window_per_second"`
	LastPerSecond  float64 `json:"last_window_per_second"`
	LastOverFirst  float64 `json:"last_over_first"`
	// ServerCPU is the server's CPU milliseconds a message over the
	// second window of pushes and the last whole one (Gitea only; zero
	// when not measured).
	ServerCPU [2]float64 `json:"server_cpu_ms_per_message_second_last"`
}

// replay is how replayPushes changes the worker's history.
type replay int

const (
	replayAsIs         replay = iota // the worker's commits
	replaySquashed                   // one commit per push and branch, of the same trees
	replayLedgerAsFile               // the branch's commits, the ledger a file a push
)

// replayPushes pushes the history of repository name from seed to its
// branch's head again, to a new repository on h, in pushes of batch
// commits of the branch (see replay for what it changes), and times each
// push. window is the messages of the first and last windows (a branch
// commit is a message).
func replayPushes(h ledgerHost, name, seed string, batch, window int, how replay, progress io.Writer) (*PeerReplay, error) {
	squash := how == replaySquashed
	src := h.path(name)
	mains, err := revList(src, seed+"..main")
	if err != nil {
		return nil, err
	}
	ledgers, err := revList(src, "refs/heads/"+ledgerBranch)
	if err != nil {
		return nil, err
	}
	if len(mains) == 0 || len(ledgers) == 0 || window < batch {
		return nil, fmt.Errorf("nothing to replay: %d branch and %d ledger commits, a window of %d for pushes of %d", len(mains), len(ledgers), window, batch)
	}
	pushes := (len(mains) + batch - 1) / batch
	tips := make([]string, pushes)
	for k := range pushes {
		tips[k] = mains[min((k+1)*batch, len(mains))-1]
	}
	var ledgerTips []string
	peer := h.repo("ledger-peer")
	if how == replayLedgerAsFile {
		peer = h.repo("ledger-peer-ledger-as-file")
		if ledgerTips, err = fileLedger(src, len(mains), batch); err != nil {
			return nil, err
		}
		ledgerTips = ledgerTips[1:] // the marker goes with the first push
	} else if ledgerTips, err = ledgerTipsFor(src, seed, mains, ledgers, batch); err != nil {
		return nil, err
	}
	if squash {
		peer = h.repo("ledger-peer-squashed")
		if tips, err = squashed(src, seed, tips, "batch"); err != nil {
			return nil, err
		}
		if ledgerTips, err = squashed(src, "", ledgerTips, "ledger"); err != nil {
			return nil, err
		}
	}
	if err := seedRepoLaid(h.srv, peer, 0, gitops.Layout{}); err != nil {
		return nil, fmt.Errorf("create %s: %w", peer, err)
	}
	to := h.pushURL(peer)
	// The replay starts where the worker did: the seed, not timed.
	if err := pushFrom(src, to, h.token, "--force", seed+":refs/heads/main"); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench (ledger, %s): the git CLI pushes the worker's %d commits again, %d pushes (%s)\n", h.name, len(mains), pushes, how)
	took := make([]time.Duration, pushes)
	packed := make([]packStat, pushes)
	cpu := &cpuSampler{h: h}
	prev, prevLedger := seed, ""
	for k := range pushes {
		tip, ledgerTip := tips[k], ledgerTips[k]
		revs := []string{tip, ledgerTip, "^" + prev}
		if prevLedger != "" {
			revs = append(revs, "^"+prevLedger)
		}
		if packed[k], err = packTime(src, revs); err != nil {
			return nil, err
		}
		prev, prevLedger = tip, ledgerTip
		cpu.sample()
		start := time.Now()
		if err := pushFrom(src, to, h.token, "--atomic", "--no-thin", tip+":refs/heads/main", ledgerTip+":refs/heads/"+ledgerBranch); err != nil {
			return nil, fmt.Errorf("push %d of %d: %w", k+1, pushes, err)
		}
		took[k] = time.Since(start)
	}
	cpu.sample()
	r := peerRates(took, packed, len(mains), batch, window)
	r.Squashed, r.LedgerAsFile = squash, how == replayLedgerAsFile
	r.ServerCPU = serverCPUPerMessage(cpu.times, batch, window)
	return r, nil
}

// ledgerTipsFor is, for each push of batch commits of the branch (mains,
// oldest first, after seed), the ledger commit (of ledgers, oldest first)
// to push with it: the newest whose messages all have their branch commit
// in that push or an earlier one, so that each push carries the records of
// its own messages, whatever the worker's batches were (a batch cut short
// makes the worker's pushes more than the replay's, and its records fall
// across two of the replay's). A branch commit names its message in its
// trailer; a ledger commit names its messages in its message, "[message
// <id>]" a line (pipeline's squash), or in the trailer when its batch was
// one message (not squashed). A ledger commit that names none of the
// branch's goes with the one before it. The last push takes the last
// ledger commit. Ids are taken to hold no blank and no "]" (SQS's are
// UUIDs).
func ledgerTipsFor(gitDir, seed string, mains, ledgers []string, batch int) ([]string, error) {
	at := make(map[string]int, len(mains)) // a branch commit's place
	for i, c := range mains {
		at[c] = i
	}
	trailer := "%(trailers:key=" + pipeline.TrailerMessageID + ",valueonly,separator=%x20)"
	out, err := gitserver.OutputIn(gitDir, "log", "--first-parent", "--format=%H "+trailer, seed+"..main")
	if err != nil {
		return nil, err
	}
	place := map[string]int{} // a message's branch commit's place
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if i, ok := at[f[0]]; ok {
			for _, id := range f[1:] {
				place[id] = i
			}
		}
	}
	out, err = gitserver.OutputIn(gitDir, "log", "--first-parent", "--format=%H%x1f"+trailer+"%x1f%B%x00", "refs/heads/"+ledgerBranch)
	if err != nil {
		return nil, err
	}
	last := map[string]int{} // a ledger commit: the last place of its messages
	for entry := range strings.SplitSeq(out, "\x00") {
		f := strings.SplitN(strings.TrimSpace(entry), "\x1f", 3)
		if len(f) < 3 {
			continue
		}
		ids := strings.Fields(f[1])
		for _, m := range messageRef.FindAllStringSubmatch(f[2], -1) {
			ids = append(ids, m[1])
		}
		last[f[0]] = -1
		for _, id := range ids {
			if i, ok := place[id]; ok {
				last[f[0]] = max(last[f[0]], i)
			}
		}
	}
	pushes := (len(mains) + batch - 1) / batch
	tips := make([]string, pushes)
	j, upTo := 0, -1 // the next ledger commit; the last place of those before it
	for k := range pushes {
		end := min((k+1)*batch, len(mains)) - 1
		for j < len(ledgers) && max(upTo, last[ledgers[j]]) <= end {
			upTo = max(upTo, last[ledgers[j]])
			j++
		}
		tips[k] = ledgers[max(j, 1)-1]
	}
	tips[pushes-1] = ledgers[len(ledgers)-1]
	return tips, nil
}

// messageRef is a message named in a ledger commit's message.
var messageRef = regexp.MustCompile(`\[message ([^\]\s]+)\]`)

func (how replay) String() string {
	return [...]string{"as the worker pushed them", "squashed", "the ledger a file a push"}[how]
}

// fileLedger writes, with git fast-import in the bare repository gitDir, a
// ledger of one commit a push of batch messages (messages in all): the
// first holds a marker, and each next one adds records/push-<k>, the two
// records of each of its onboardings (onboardingRecords), and
// messages/push-<k>, a line a message (its id and send time). It returns
// the commits, the marker's first. They are on no ref: pushed by id.
func fileLedger(gitDir string, messages, batch int) ([]string, error) {
	pushes := (messages + batch - 1) / batch
	byMark, err := fastImport(gitDir, func(w *bufio.Writer) error {
		when := int64(1_700_000_000)
		commit := func(mark int, files map[string]string) {
			// On a ref fast-import needs, deleted after.
			fmt.Fprintf(w, "commit refs/heads/file-ledger\nmark :%d\ncommitter bench <bench@example.com> %d +0000\ndata 7\nledger\n", mark, when)
			for _, p := range slices.Sorted(maps.Keys(files)) {
				fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n%s\n", p, len(files[p]), files[p])
			}
			when++
		}
		commit(1, map[string]string{"README": "ledger of the replay, a file a push\n"})
		tiers := []string{"basic", "advanced", "premium"}
		for k := 1; k <= pushes; k++ {
			var records, ids strings.Builder
			for i := range min(batch, messages-(k-1)*batch) {
				for _, r := range onboardingRecords(fmt.Sprintf("replay-%d-%d", k, i), tiers[i%len(tiers)], when) {
					records.WriteString(r + "\n")
				}
				fmt.Fprintf(&ids, "%08x-0000-4000-8000-%012x %d000\n", k, i, when)
			}
			commit(k+1, map[string]string{fmt.Sprintf("records/push-%04d", k): records.String(), fmt.Sprintf("messages/push-%04d", k): ids.String()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := gitserver.OutputIn(gitDir, "update-ref", "-d", "refs/heads/file-ledger"); err != nil {
		return nil, err // the commits stay, by their ids
	}
	tips := make([]string, pushes+1)
	for k := range tips {
		if tips[k] = byMark[fmt.Sprintf(":%d", k+1)]; tips[k] == "" {
			return nil, fmt.Errorf("git fast-import: no commit for push %d", k)
		}
	}
	return tips, nil
}

// squashed makes, in the bare repository at gitDir, one commit of each of
// tips' trees, each the parent of the next, the first on parent (none when
// empty), and returns them.
func squashed(gitDir, parent string, tips []string, msg string) ([]string, error) {
	out := make([]string, len(tips))
	for i, tip := range tips {
		args := []string{"commit-tree", tip + "^{tree}", "-m", fmt.Sprintf("%s %d", msg, i+1)}
		if parent != "" {
			args = append(args, "-p", parent)
		}
		c, err := gitserver.OutputIn(gitDir, args...)
		if err != nil {
			return nil, err
		}
		out[i] = strings.TrimSpace(c)
		parent = out[i]
	}
	return out, nil
}

// packStat is git writing one push's pack: how long it took, how big.
type packStat struct {
	took  time.Duration
	bytes int64
}

// packTime times git writing the pack of revs (as rev-list takes them) in
// the bare repository at gitDir, as a push of them would, to nowhere, and
// counts its bytes.
func packTime(gitDir string, revs []string) (packStat, error) {
	cmd := exec.Command("git", "--git-dir", gitDir, "pack-objects", "--revs", "--stdout", "-q")
	cmd.Stdin = strings.NewReader(strings.Join(revs, "\n") + "\n")
	var n countWriter
	cmd.Stdout = &n
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return packStat{}, fmt.Errorf("git pack-objects: %w: %s", err, stderr.String())
	}
	return packStat{took: time.Since(start), bytes: int64(n)}, nil
}

// countWriter counts what is written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// revList is the first-parent history of rev in the bare repository at
// gitDir, oldest first.
func revList(gitDir, rev string) ([]string, error) {
	out, err := gitserver.OutputIn(gitDir, "rev-list", "--first-parent", "--reverse", rev)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// pushFrom runs git push from the bare repository at gitDir to url (which
// may hold token: it is blanked from any error).
func pushFrom(gitDir, url, token string, args ...string) error {
	cmd := exec.Command("git", append([]string{"--git-dir", gitDir, "push", "-q", url}, args...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("git push %s: %v: %s", strings.Join(args, " "), err, out)
	if token != "" {
		msg = strings.ReplaceAll(msg, token, "<token>")
	}
	return fmt.Errorf("%s", msg)
}
