package bench

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/kustomization"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// boundedPushes is the git command line pushing, to a fresh repository on
// h, a history made to carry the same at every push: from the worker's
// seed (its tenants, untimed), each push adds batch new tenants (the last
// what is left of messages), one file each as the worker renders them, in
// a new folder per tier with its kustomization (listed in the tier's), and
// moves the ledger branch in the same atomic push with the same records:
// a file of the push's message ids, and the two records each onboarding
// leaves in the worker's ledger (the tenant's and its release's), keyed as
// the worker keys them. What still makes its last pushes slower than its
// first is the server's work growing with the repository (its files,
// history and packs), which no client's layout removes.
//
// records says where the records go: with recordsPerPush in one file per
// push, and every push is about the same size; in groups by key, as the
// worker's ledger keeps them, each push rewrites a group file and its
// folders per record, and those grow as the groups fill; with
// recordsJournal in a file per push too, and each push merges a sixteenth
// of the keys from the journal into the groups (a design not built in the
// worker, measured here first).
func boundedPushes(h ledgerHost, name, seed string, messages, batch, window int, records recordLayout, progress io.Writer) (*PeerReplay, error) {
	src := h.path(name)
	if messages < 2*window || window < batch {
		return nil, fmt.Errorf("bounded peer: %d messages for windows of %d and pushes of %d", messages, window, batch)
	}
	tmpl, seedID, tenants, tiers, err := tenantTemplate(src, seed)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bounded-peer-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	work := filepath.Join(dir, "work.git")
	if _, err := gitserver.OutputIn(dir, "init", "-q", "--bare", work); err != nil {
		return nil, err
	}
	// The seed's objects are read from the worker's repository.
	if err := os.WriteFile(filepath.Join(work, "objects", "info", "alternates"), []byte(filepath.Join(src, "objects")+"\n"), 0o644); err != nil {
		return nil, err
	}
	pushes := (messages + batch - 1) / batch
	tips, ledgerTips, err := boundedHistory(work, seed, tmpl, seedID, tenants, tiers, messages, batch, records)
	if err != nil {
		return nil, err
	}
	peer := h.repo("ledger-peer-bounded-" + records.name())
	if err := seedRepoLaid(h.srv, peer, 0, gitops.Layout{}); err != nil {
		return nil, fmt.Errorf("create %s: %w", peer, err)
	}
	to := h.pushURL(peer)
	if err := pushFrom(work, to, h.token, "--force", "--atomic", tips[0]+":refs/heads/main", ledgerTips[0]+":refs/heads/"+ledgerBranch); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench (ledger, %s): the git CLI pushes %d new tenants, %d pushes of the same size (records: %s)\n", h.name, messages, pushes, records)
	took, packed := make([]time.Duration, pushes), make([]packStat, pushes)
	cpu := &cpuSampler{h: h}
	for k := 1; k <= pushes; k++ {
		if packed[k-1], err = packTime(work, []string{tips[k], ledgerTips[k], "^" + tips[k-1], "^" + ledgerTips[k-1]}); err != nil {
			return nil, err
		}
		cpu.sample()
		start := time.Now()
		if err := pushFrom(work, to, h.token, "--atomic", "--no-thin", tips[k]+":refs/heads/main", ledgerTips[k]+":refs/heads/"+ledgerBranch); err != nil {
			return nil, fmt.Errorf("push %d of %d: %w", k, pushes, err)
		}
		took[k-1] = time.Since(start)
		if k%10 == 0 || k == pushes {
			fmt.Fprintf(progress, "bench (ledger, %s): bounded push %d of %d: %d ms\n", h.name, k, pushes, took[k-1].Milliseconds())
		}
	}
	cpu.sample()
	r := peerRates(took, packed, messages, batch, window)
	r.Bounded, r.Records = true, records.String()
	r.ServerCPU = serverCPUPerMessage(cpu.times, batch, window)
	return r, nil
}

// cpuSampler takes the server's CPU time before each push of a peer and
// after the last, where the server is a process of its own (Gitea): the
// git processes that write each pack here are the bench's.
type cpuSampler struct {
	h     ledgerHost
	times []time.Duration
}

func (c *cpuSampler) sample() {
	if c.h.name == "gitea" && c.h.cpu != nil {
		c.times = append(c.times, c.h.cpu())
	}
}

// serverCPUPerMessage is the server's CPU milliseconds a message over the
// second window of pushes and the last whole one, from its CPU before each
// push and after the last (cpu): from one push's start to the next's holds
// that push and the server's work after the push before it. Zero when
// there are not enough samples.
func serverCPUPerMessage(cpu []time.Duration, batch, window int) [2]float64 {
	k := max(1, window/batch) // pushes per window
	pushes := len(cpu) - 1
	if pushes < 3*k+1 { // the second window and the last whole one apart
		return [2]float64{}
	}
	per := func(from, to int) float64 {
		return float64((cpu[to] - cpu[from]).Milliseconds()) / float64(k*batch)
	}
	// The last whole window ends before the last push, whose server work
	// after it is not measured.
	return [2]float64{per(k, 2*k), per(pushes-1-k, pushes-1)}
}

// peerRates fills a PeerReplay from each push's time and its pack's, for
// pushes of batch messages (the last may hold fewer) and windows of window
// messages.
func peerRates(took []time.Duration, packed []packStat, messages, batch, window int) *PeerReplay {
	pushes := len(took)
	r := &PeerReplay{Pushes: pushes}
	var total time.Duration
	for _, d := range took {
		total += d
	}
	r.Seconds = total.Seconds()
	r.PerSecond = float64(messages) / r.Seconds
	k := window / batch // pushes per window
	var first, last, packFirst, packLast time.Duration
	var bytesFirst, bytesLast int64
	for i := range k {
		first += took[i]
		last += took[pushes-1-i]
		packFirst += packed[i].took
		packLast += packed[pushes-1-i].took
		bytesFirst += packed[i].bytes
		bytesLast += packed[pushes-1-i].bytes
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(k) / float64(time.Millisecond) }
	r.PushFirstMS, r.PushLastMS, r.PackFirstMS, r.PackLastMS = ms(first), ms(last), ms(packFirst), ms(packLast)
	r.PackFirstKB, r.PackLastKB = float64(bytesFirst)/float64(k)/1024, float64(bytesLast)/float64(k)/1024
	// The last push may carry fewer messages than a batch: count them.
	lastMessages := messages - (pushes-k)*batch
	r.FirstPerSecond = float64(k*batch) / first.Seconds()
	r.LastPerSecond = float64(lastMessages) / last.Seconds()
	r.LastOverFirst = r.LastPerSecond / r.FirstPerSecond
	return r
}

// tenantTemplate finds, in the seed's tree, the file of one seeded tenant,
// and returns its content, that tenant's id, the tenants' folder and its
// tiers (the folders in it).
func tenantTemplate(gitDir, seed string) (content, id, tenants string, tiers []string, err error) {
	out, err := gitserver.OutputIn(gitDir, "ls-tree", "-r", "--name-only", seed)
	if err != nil {
		return "", "", "", nil, err
	}
	file := ""
	for _, p := range strings.Fields(out) {
		if strings.HasPrefix(path.Base(p), "seed-1.") && strings.Contains(p, "/tenants/") {
			file = p
			tenants = p[:strings.LastIndex(p, "/tenants/")+len("/tenants")]
			break
		}
	}
	if file == "" {
		return "", "", "", nil, fmt.Errorf("bounded peer: no seeded tenant file in %s", seed)
	}
	seen := map[string]bool{}
	for _, p := range strings.Fields(out) {
		rel, ok := strings.CutPrefix(p, tenants+"/")
		if tier, _, sub := strings.Cut(rel, "/"); ok && sub && !seen[tier] {
			seen[tier] = true
			tiers = append(tiers, tier)
		}
	}
	content, err = gitserver.OutputIn(gitDir, "cat-file", "blob", seed+":"+file)
	if err != nil {
		return "", "", "", nil, err
	}
	sort.Strings(tiers)
	return content, "seed-1", tenants, tiers, nil
}

// boundedHistory writes, with git fast-import in the bare repository work,
// a commit on the branch from seed per batch of the messages tenants (the
// last one with what is left) and as many on a new ledger branch (its
// first holds nothing but a marker), and returns the tips: the seed and
// each push's commit, the ledger's first and each push's.
func boundedHistory(work, seed, tmpl, seedID, tenants string, tiers []string, messages, batch int, layout recordLayout) (tips, ledgerTips []string, err error) {
	tierLists := map[string]string{} // a tier's kustomization
	for _, tier := range tiers {
		p := path.Join(tenants, tier, "kustomization.yaml")
		if tierLists[tier], err = gitserver.OutputIn(work, "cat-file", "blob", seed+":"+p); err != nil {
			return nil, nil, err
		}
	}
	pushes := (messages + batch - 1) / batch
	byMark, err := fastImport(work, func(w *bufio.Writer) error {
		return writeBoundedHistory(w, seed, tmpl, seedID, tenants, tiers, tierLists, messages, batch, layout)
	})
	if err != nil {
		return nil, nil, err
	}
	tips, ledgerTips = []string{seed}, []string{byMark[":1"]}
	for k := 1; k <= pushes; k++ {
		tips = append(tips, byMark[fmt.Sprintf(":%d", 2*k)])
		ledgerTips = append(ledgerTips, byMark[fmt.Sprintf(":%d", 2*k+1)])
	}
	return tips, ledgerTips, nil
}

// writeBoundedHistory writes boundedHistory's commits to w, a fast-import
// stream: the ledger's first (mark 1), then the branch's and the ledger's
// of push k (marks 2k and 2k+1).
func writeBoundedHistory(w *bufio.Writer, seed, tmpl, seedID, tenants string, tiers []string, tierLists map[string]string, messages, batch int, layout recordLayout) error {
	data := func(s string) { fmt.Fprintf(w, "data %d\n%s\n", len(s), s) }
	file := func(p, s string) { fmt.Fprintf(w, "M 100644 inline %s\n", p); data(s) }
	when := 1_700_000_000
	commit := func(ref string, mark int, msg, from string) {
		fmt.Fprintf(w, "commit %s\nmark :%d\ncommitter bench <bench@example.com> %d +0000\n", ref, mark, when)
		when++
		data(msg)
		if from != "" {
			fmt.Fprintf(w, "from %s\n", from)
		}
	}
	const ledgerRef = "refs/heads/ledger"
	commit(ledgerRef, 1, "ledger", "")
	file("README", "ledger of the bounded peer\n")
	groups := map[string][]string{} // a record group's records
	// recordsJournal: each push's records, how many journal files each
	// first hex digit's records were merged from, how many files went.
	var journal [][]journaled
	var merged [16]int
	dropped := 0
	pushes := (messages + batch - 1) / batch
	for k := 1; k <= pushes; k++ {
		from := ""
		if k == 1 {
			from = seed
		}
		commit("refs/heads/main", 2*k, fmt.Sprintf("batch %d", k), from)
		folder := fmt.Sprintf("bounded-%04d", k)
		listed := map[string][]string{} // a tier's new tenants' files
		var ids, records []string
		for i := range min(batch, messages-(k-1)*batch) {
			id := fmt.Sprintf("bounded-%d-%d", k, i)
			tier := tiers[i%len(tiers)]
			ids = append(ids, id)
			// The two records an onboarding leaves, as the worker keys
			// them: the tenant's tier and its release in that tier.
			records = append(records, onboardingRecords(id, tier, int64(when))...)
			listed[tier] = append(listed[tier], id+".yaml")
			file(path.Join(tenants, tier, folder, id+".yaml"), strings.ReplaceAll(tmpl, seedID, id))
		}
		for tier, files := range listed {
			file(path.Join(tenants, tier, folder, "kustomization.yaml"), string(gitops.ShardKustomization(files)))
			list, _, err := kustomization.Add([]byte(tierLists[tier]), folder)
			if err != nil {
				return fmt.Errorf("%s's kustomization: %w", tier, err)
			}
			tierLists[tier] = string(list)
			file(path.Join(tenants, tier, "kustomization.yaml"), tierLists[tier])
		}
		commit(ledgerRef, 2*k+1, fmt.Sprintf("ledger %d", k), "")
		changed := map[string]bool{} // the key groups this push writes
		add := func(g, r string) {
			groups[g] = append(groups[g], r)
			changed[g] = true
		}
		switch layout {
		case recordsPerPush:
			file(path.Join("records", folder), strings.Join(records, "\n")+"\n")
		case recordsJournal:
			// The push's records in a journal file; then the records of one
			// first hex digit of 16, in turn, from every journal file, go to
			// their key groups (targets/<h0>/<h1>/<h2>/<h3>), and a journal
			// file whose records are all in groups goes.
			file(path.Join("journal", folder), strings.Join(records, "\n")+"\n")
			entries := make([]journaled, len(records))
			for i, r := range records {
				key, _, _ := strings.Cut(r, " ")
				entries[i] = journaled{group: recordsIn16s.group(key), record: r}
			}
			journal = append(journal, entries)
			digit := (k - 1) % 16
			for _, entries := range journal[merged[digit]:] {
				for _, e := range entries {
					if e.group[len("targets/")] == "0123456789abcdef"[digit] {
						add(e.group, e.record)
					}
				}
			}
			merged[digit] = len(journal)
			for done := slices.Min(merged[:]); dropped < done; dropped++ {
				fmt.Fprintf(w, "D journal/bounded-%04d\n", dropped+1)
			}
		default:
			for _, r := range records {
				key, _, _ := strings.Cut(r, " ")
				add(layout.group(key), r)
			}
		}
		for g := range changed {
			file(g, groupFile(g, groups[g]))
		}
		file(path.Join("messages", folder), strings.Join(ids, "\n")+"\n")
	}
	return nil
}

// onboardingRecords are the two ledger records an onboarding of tenant id
// to tier, sent at sent (Unix seconds), leaves, as the worker keys and
// writes them: that the tenant exists (no value), and its release in that
// tier.
func onboardingRecords(id, tier string, sent int64) []string {
	return []string{fmt.Sprintf("%s %d000", ledger.Tenant(id), sent), fmt.Sprintf("%s %d000 0.0", ledger.ReleaseIn(tier, id), sent)}
}

// fastImport runs git fast-import in the bare repository gitDir on the
// stream write writes (commits with marks), and returns the commit each
// mark names (":1" to its id). An error of write ends the import.
func fastImport(gitDir string, write func(w *bufio.Writer) error) (map[string]string, error) {
	marks, err := os.CreateTemp("", "fast-import-marks-")
	if err != nil {
		return nil, err
	}
	marks.Close()
	defer os.Remove(marks.Name())
	cmd := exec.Command("git", "--git-dir", gitDir, "fast-import", "--quiet", "--export-marks="+marks.Name())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(in, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	in.Close()
	if werr := cmd.Wait(); werr != nil || err != nil {
		return nil, fmt.Errorf("git fast-import: %w: %s", errors.Join(err, werr), stderr.String())
	}
	out, err := os.ReadFile(marks.Name())
	if err != nil {
		return nil, err
	}
	byMark := map[string]string{}
	for l := range strings.Lines(string(out)) {
		if m, id, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			byMark[m] = id
		}
	}
	return byMark, nil
}

// journaled is a record in a journal file, and the key group it goes to.
type journaled struct{ group, record string }

// groupFile is the content of key group g holding records.
func groupFile(g string, records []string) string {
	return "# tenant-worker ledger: targets whose key's sha256 starts " + strings.ReplaceAll(strings.TrimPrefix(g, "targets/"), "/", "") +
		": key, send time (Unix ms, SQS SentTimestamp) of the last message applied to it, value\n" + strings.Join(records, "\n") + "\n"
}

// recordLayout is where boundedPushes puts the ledger's records.
type recordLayout int

const (
	// recordsPerPush: one file of each push's records.
	recordsPerPush recordLayout = iota
	// recordsIn16s: each record in the group of its key's hash, as the
	// worker's ledger kept them until 2026-12-06 (since, an onboarding's
	// two records share its tenant's group), targets/<h0>/<h1>/<h2>/<h3> (65,536
	// files in folders of at most 16, 4,369 folders when all are there).
	recordsIn16s
	// recordsIn256s: the same groups as the worker's ledger kept them
	// before 2026-12-05, targets/<h0h1>/<h2h3> (257 folders, of up to 256
	// entries).
	recordsIn256s
	// recordsJournal: each push's records in a journal file, and those of
	// one first hex digit in 16, in turn, merged from every journal file
	// into the groups of recordsIn16s; a journal file goes once all 16
	// have been merged from it (16 pushes later). A lookup would read its
	// key's group and at most 16 journal files.
	recordsJournal
)

func (l recordLayout) String() string {
	switch l {
	case recordsIn16s:
		return "targets/<h0>/<h1>/<h2>/<h3>"
	case recordsIn256s:
		return "targets/<h0h1>/<h2h3>"
	case recordsJournal:
		return "a journal file per push, merged into targets/<h0>/<h1>/<h2>/<h3> a 16th at a time"
	}
	return "a file per push"
}

// name is the layout in a repository's name.
func (l recordLayout) name() string {
	return [...]string{"per-push", "16s", "256s", "journal"}[l]
}

// group is the file of key's records.
func (l recordLayout) group(key string) string {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:2])
	if l == recordsIn256s {
		return path.Join("targets", h[:2], h[2:])
	}
	return path.Join("targets", h[0:1], h[1:2], h[2:3], h[3:4])
}
