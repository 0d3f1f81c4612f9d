package bench

import (
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// replaySource is a git server holding src.git, seeded with 3 tenants, and
// a reader of a ref of one of its repositories.
func replaySource(t *testing.T) (*gitserver.Server, func(repo, ref string) string) {
	t.Helper()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := seedRepoLaid(srv, "src.git", 3, gitops.Layout{}); err != nil {
		t.Fatal(err)
	}
	return srv, func(repo, ref string) string {
		t.Helper()
		out, err := srv.Output(repo, "rev-parse", ref)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
}

// TestReplayPushesTheSameHistory: the replay ends with the fresh
// repository's branch and ledger branch where the source's are, in one push
// per batch of branch commits.
func TestReplayPushesTheSameHistory(t *testing.T) {
	srv, head := replaySource(t)
	seed := head("src.git", "main")
	if _, err := srv.Output("src.git", "branch", ledgerBranch, "main"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := srv.WriteFile("src.git", "main", fmt.Sprintf("m%d", i), "x", "message"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := srv.WriteFile("src.git", ledgerBranch, fmt.Sprintf("l%d", i), "x", "ledger"); err != nil {
			t.Fatal(err)
		}
	}
	h := ledgerHost{name: "http-backend", srv: srv, repo: func(k string) string { return k + ".git" },
		url: srv.RepoURL, path: srv.RepoPath, pushURL: srv.RepoURL}
	for _, how := range []replay{replayAsIs, replaySquashed, replayLedgerAsFile} {
		r, err := replayPushes(h, "src.git", seed, 2, 2, how, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if r.Pushes != 3 || r.PerSecond <= 0 || r.LastOverFirst <= 0 {
			t.Errorf("replay (%s): %+v, want 3 pushes and rates", how, r)
		}
		peer, rev := "ledger-peer.git", ""
		switch how {
		case replaySquashed:
			peer, rev = "ledger-peer-squashed.git", "^{tree}"
		case replayLedgerAsFile:
			peer = "ledger-peer-ledger-as-file.git"
		}
		if got, want := head(peer, "main"+rev), head("src.git", "main"+rev); got != want {
			t.Errorf("main replayed (%s) to %s, want %s", how, got, want)
		}
		if how != replayLedgerAsFile {
			if got, want := head(peer, ledgerBranch+rev), head("src.git", ledgerBranch+rev); got != want {
				t.Errorf("the ledger replayed (%s) to %s, want %s", how, got, want)
			}
		}
		if how == replaySquashed {
			// One commit per push on the branch: 3 after the seed.
			if n, err := srv.Output(peer, "rev-list", "--count", seed+"..main"); err != nil || strings.TrimSpace(n) != "3" {
				t.Errorf("squashed branch has %q commits after the seed (%v), want 3", n, err)
			}
		}
		if how == replayLedgerAsFile {
			// A commit a push after the marker, each adding the push's
			// records (two a message of the branch) and message ids (one
			// a message): 5 branch commits in pushes of 2.
			if n, err := srv.Output(peer, "rev-list", "--count", ledgerBranch); err != nil || strings.TrimSpace(n) != "4" {
				t.Errorf("the file ledger has %q commits (%v), want 4", n, err)
			}
			for k, want := range []int{2, 2, 1} {
				for dir, per := range map[string]int{"records": 2, "messages": 1} {
					out, err := srv.Output(peer, "cat-file", "blob", fmt.Sprintf("%s:%s/push-%04d", ledgerBranch, dir, k+1))
					if err != nil {
						t.Fatal(err)
					}
					if n := strings.Count(out, "\n"); n != per*want {
						t.Errorf("%s/push-%04d holds %d lines, want %d", dir, k+1, n, per*want)
					}
				}
			}
			if refs, err := srv.Output("src.git", "for-each-ref", "--format=%(refname)"); err != nil || strings.Contains(refs, "file-ledger") {
				t.Errorf("the source keeps a ref of the file ledger: %q (%v)", refs, err)
			}
		}
	}
}

// TestBoundedPushesAddTheSameEveryTime: the bounded peer's pushes each add
// a batch of tenants, rendered like the seed's, in a new folder per tier,
// and the batch's records and message ids to the ledger branch, in one
// push of both branches, every push about the same size.
func TestBoundedPushesAddTheSameEveryTime(t *testing.T) {
	srv, h, seed := boundedSource(t)
	const messages, batch = 120, 30
	r, err := boundedPushes(h, "src.git", seed, messages, batch, 2*batch, recordsPerPush, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bounded peer: %+v", *r)
	if !r.Bounded || r.Pushes != messages/batch || r.LastOverFirst <= 0 {
		t.Errorf("bounded peer: %+v, want %d pushes and rates", r, messages/batch)
	}
	// Every push the same size, give or take a line of the tiers' lists.
	if r.PackFirstKB <= 0 || r.PackLastKB > 1.1*r.PackFirstKB || r.PackLastKB < r.PackFirstKB/1.1 {
		t.Errorf("bounded peer's packs: %.1f KB first, %.1f KB last, want about the same", r.PackFirstKB, r.PackLastKB)
	}
	_, _, _, tiers, err := tenantTemplate(srv.RepoPath("src.git"), seed)
	if err != nil || len(tiers) < 2 {
		t.Fatalf("tiers %v: %v", tiers, err)
	}
	peer := "ledger-peer-bounded-per-push.git"
	files, err := srv.Output(peer, "ls-tree", "-r", "--name-only", "main")
	if err != nil {
		t.Fatal(err)
	}
	perFolder := map[string]int{}
	for _, p := range strings.Fields(files) {
		if strings.Contains(p, "/bounded-") && !strings.HasSuffix(p, "/kustomization.yaml") {
			perFolder[path.Dir(p)]++
		}
	}
	added := 0
	for dir, n := range perFolder {
		added += n
		if n != batch/len(tiers) {
			t.Errorf("%s holds %d tenants, want %d", dir, n, batch/len(tiers))
		}
	}
	if added != messages || len(perFolder) != len(tiers)*r.Pushes {
		t.Errorf("%d tenant files added in %d folders, want %d in %d", added, len(perFolder), messages, len(tiers)*r.Pushes)
	}
	// Each added tenant's file is the seed's, for its own id.
	seedFile, err := srv.Output("src.git", "show", "main:"+seeded(t, srv, "src.git", "seed-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := srv.Output(peer, "show", "main:"+seeded(t, srv, peer, "bounded-1-0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(seedFile, "seed-1", "bounded-1-0"); got != want || !strings.Contains(got, "bounded-1-0") {
		t.Errorf("bounded-1-0's file:\n%s\nwant the seed's for its id:\n%s", got, want)
	}
	records, err := srv.Output(peer, "grep", "-h", "-e", "^tenant/", "-e", "^release/", ledgerBranch, "--", "records")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(records, "\n"); n != 2*messages {
		t.Errorf("%d ledger records, want %d", n, 2*messages)
	}
	// Grouped, the same records are in groups by key, a file each.
	for layout, depth := range map[recordLayout]int{recordsIn16s: 4, recordsIn256s: 2} {
		if _, err := boundedPushes(h, "src.git", seed, messages, batch, 2*batch, layout, io.Discard); err != nil {
			t.Fatal(err)
		}
		peer = "ledger-peer-bounded-" + layout.name() + ".git"
		if records, err = srv.Output(peer, "grep", "-h", "-e", "^tenant/", "-e", "^release/", ledgerBranch, "--", "targets"); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(records, "\n"); n != 2*messages {
			t.Errorf("%s: %d ledger records, want %d", layout, n, 2*messages)
		}
		groups, err := srv.Output(peer, "ls-tree", "-r", "--name-only", ledgerBranch, "--", "targets")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range strings.Fields(groups) {
			if strings.Count(g, "/") != depth {
				t.Errorf("%s: record group %s", layout, g)
			}
		}
		if n := len(strings.Fields(groups)); n < messages/2 {
			t.Errorf("%s: %d groups for %d records", layout, n, messages)
		}
	}
	// In a journal: every record is in its key's group or in a journal
	// file not yet merged from, and at most 16 journal files are left. In
	// pushes of 5, 24 of them: files go once every digit is merged.
	const small = 5
	if _, err := boundedPushes(h, "src.git", seed, messages, small, 2*small, recordsJournal, io.Discard); err != nil {
		t.Fatal(err)
	}
	peer = "ledger-peer-bounded-" + recordsJournal.name() + ".git"
	if records, err = srv.Output(peer, "grep", "-h", "-e", "^tenant/", "-e", "^release/", ledgerBranch, "--", "targets", "journal"); err != nil {
		t.Fatal(err)
	}
	distinct := map[string]bool{}
	for _, r := range strings.Split(strings.TrimSpace(records), "\n") {
		distinct[r] = true
	}
	if len(distinct) != 2*messages {
		t.Errorf("journal: %d distinct ledger records, want %d", len(distinct), 2*messages)
	}
	journal, err := srv.Output(peer, "ls-tree", "--name-only", ledgerBranch+":journal")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(journal)); n == 0 || n > 16 {
		t.Errorf("journal: %d files left after %d pushes, want 1 to 16", n, messages/small)
	}
}

// seeded is the path on main of the one file named base in repo.
func seeded(t *testing.T, srv *gitserver.Server, repo, base string) string {
	t.Helper()
	out, err := srv.Output(repo, "ls-tree", "-r", "--name-only", "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(out) {
		if path.Base(p) == base {
			return p
		}
	}
	t.Fatalf("no %s in %s", base, repo)
	return ""
}

// boundedSource is git's server holding src.git, seeded with 3 tenants,
// its host, and the seed's commit: what boundedPushes starts from.
func boundedSource(t *testing.T) (*gitserver.Server, ledgerHost, string) {
	t.Helper()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := seedRepoWith(srv, "src.git", 3, seedSpec{Tiers: []string{"basic", "premium"}}); err != nil {
		t.Fatal(err)
	}
	out, err := srv.Output("src.git", "rev-parse", "main")
	if err != nil {
		t.Fatal(err)
	}
	h := ledgerHost{name: "http-backend", srv: srv, repo: func(k string) string { return k + ".git" },
		url: srv.RepoURL, path: srv.RepoPath, pushURL: srv.RepoURL}
	return srv, h, strings.TrimSpace(out)
}

// TestReplayCarriesEachMessagesRecordsWithIt: when the worker's batches
// were not the replay's (a batch cut short, so more worker pushes than
// replay pushes), each replay push carries the worker's ledger commits
// whose messages all have their branch commit in that push or before,
// and the last push the last. A worker push of one message keeps the
// job's own commit message (the squash needs two), whose trailer names it.
func TestReplayCarriesEachMessagesRecordsWithIt(t *testing.T) {
	for _, c := range []struct {
		name   string
		branch int        // branch commits m0, m1, ...: the replay pushes 2 at a time
		pushes [][]string // the worker's pushes, the messages of each
		want   []int      // the ledger commit (by worker push) of each replay push
	}{
		{"a batch cut short", 6, [][]string{{"m0"}, {"m1", "m2"}, {"m3", "m4"}, {"m5"}}, []int{0, 1, 3}},
		{"one message between larger batches", 6, [][]string{{"m0", "m1"}, {"m2"}, {"m3", "m4", "m5"}}, []int{0, 1, 2}},
		{"one message a push", 4, [][]string{{"m0"}, {"m1"}, {"m2"}, {"m3"}}, []int{1, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, head := replaySource(t)
			rev := func(ref string) string { return head("src.git", ref) }
			seed := rev("main")
			for i := range c.branch {
				msg := fmt.Sprintf("Onboard m%d\n\n%s: m%d\n", i, pipeline.TrailerMessageID, i)
				if err := srv.WriteFile("src.git", "main", fmt.Sprintf("m%d", i), "x", msg); err != nil {
					t.Fatal(err)
				}
			}
			// The ledger branch's root, which names no message, as the
			// seed's would; then the worker's pushes, each message as the
			// pipeline writes it.
			root, err := srv.Output("src.git", "commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", "ledger")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Output("src.git", "update-ref", "refs/heads/"+ledgerBranch, strings.TrimSpace(root)); err != nil {
				t.Fatal(err)
			}
			var ledgers []string
			for i, ids := range c.pushes {
				var b strings.Builder
				if len(ids) == 1 {
					fmt.Fprintf(&b, "Onboard %s\n\n%s: %s\n", ids[0], pipeline.TrailerMessageID, ids[0])
				} else {
					fmt.Fprintf(&b, "Ledger: %d messages\n\n", len(ids))
					for _, id := range ids {
						fmt.Fprintf(&b, "- Onboard %s [message %s]\n", id, id)
					}
				}
				if err := srv.WriteFile("src.git", ledgerBranch, fmt.Sprintf("l%d", i), "x", b.String()); err != nil {
					t.Fatal(err)
				}
				ledgers = append(ledgers, rev(ledgerBranch))
			}
			mains, err := revList(srv.RepoPath("src.git"), seed+"..main")
			if err != nil {
				t.Fatal(err)
			}
			all, err := revList(srv.RepoPath("src.git"), "refs/heads/"+ledgerBranch)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ledgerTipsFor(srv.RepoPath("src.git"), seed, mains, all, 2)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range c.want {
				want = append(want, ledgers[w])
			}
			if !slices.Equal(got, want) {
				t.Errorf("ledger tips %v, want %v", got, want)
			}
		})
	}
}
