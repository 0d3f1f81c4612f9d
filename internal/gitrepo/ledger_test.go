package gitrepo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

func openWithLedger(t *testing.T, url string) *Repo {
	t.Helper()
	r, err := Open(context.Background(), Options{URL: url, Branch: "main", LedgerBranch: "tenant-worker/ledger",
		Username: "admin", Token: token, AuthorName: "admin", AuthorEmail: "admin@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPushMovesBranchAndLedgerAsOne: the ledger branch is created by the
// first push that carries it, moved with the branch in one atomic push,
// or alone; a second clone fetches both; a push whose ledger side is
// stale is a lost race that moves neither ref.
func TestPushMovesBranchAndLedgerAsOne(t *testing.T) {
	srv, url := startServer(t)
	r := openWithLedger(t, url)
	if !r.LedgerHead().IsZero() {
		t.Fatalf("ledger head %s before it exists", r.LedgerHead())
	}
	ok, err := r.SupportsAtomic(context.Background())
	if err != nil || !ok {
		t.Fatalf("SupportsAtomic = %v %v, want true (git http-backend)", ok, err)
	}
	main0 := r.Head()
	c1, err := r.Commit(main0, map[string][]byte{"a/x.yaml": []byte("x\n")}, "change")
	if err != nil {
		t.Fatal(err)
	}
	l1, err := r.Commit(r.LedgerHead(), map[string][]byte{"messages/1": []byte("m1 1\n")}, "record")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PushRefs(context.Background(), Move{main0, c1}, Move{r.LedgerHead(), l1}); err != nil {
		t.Fatal(err)
	}
	heads := func() string {
		out, err := srv.Output("gitops.git", "for-each-ref", "--format=%(refname) %(objectname)")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if h := heads(); !strings.Contains(h, "refs/heads/main "+c1.String()) || !strings.Contains(h, "refs/heads/tenant-worker/ledger "+l1.String()) {
		t.Fatalf("refs after the push:\n%s", h)
	}
	// The ledger alone: the branch Flux reads does not move.
	l2, err := r.Commit(l1, map[string][]byte{"messages/2": []byte("m2 2\n")}, "record only")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PushRefs(context.Background(), Move{c1, c1}, Move{l1, l2}); err != nil {
		t.Fatal(err)
	}
	other := openWithLedger(t, url)
	if other.Head() != c1 || other.LedgerHead() != l2 {
		t.Fatalf("a new clone sees %s and %s, want %s and %s", other.Head(), other.LedgerHead(), c1, l2)
	}
	// The other clone moves the ledger; r's push, built on l2, must fail
	// whole: the branch must not move either.
	l3, _ := other.Commit(l2, map[string][]byte{"messages/3": []byte("m3 3\n")}, "other")
	if err := other.PushRefs(context.Background(), Move{c1, c1}, Move{l2, l3}); err != nil {
		t.Fatal(err)
	}
	c4, _ := r.Commit(c1, map[string][]byte{"a/y.yaml": []byte("y\n")}, "change 2")
	l4, _ := r.Commit(l2, map[string][]byte{"messages/4": []byte("m4 4\n")}, "record 2")
	err = r.PushRefs(context.Background(), Move{c1, c4}, Move{l2, l4})
	if !IsConflict(err) {
		t.Fatalf("push on a stale ledger: %v, want a lost race", err)
	}
	if h := heads(); !strings.Contains(h, "refs/heads/main "+c1.String()) || !strings.Contains(h, "refs/heads/tenant-worker/ledger "+l3.String()) {
		t.Fatalf("a lost race moved a ref:\n%s", h)
	}
	if _, err := r.Fetch(context.Background()); err != nil || r.LedgerHead() != l3 {
		t.Fatalf("fetch: %v, ledger head %s, want %s", err, r.LedgerHead(), l3)
	}
}

// TestNoAtomicNoTwoRefPush: a server that does not offer atomic pushes
// (receive.advertiseAtomic false) is told apart, and a push of both refs
// is refused before anything is sent: neither ref moves.
func TestNoAtomicNoTwoRefPush(t *testing.T) {
	srv, url := startServer(t)
	if out, err := srv.Output("gitops.git", "config", "receive.advertiseAtomic", "false"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	r := openWithLedger(t, url)
	if ok, err := r.SupportsAtomic(context.Background()); err != nil || ok {
		t.Fatalf("SupportsAtomic = %v %v, want false", ok, err)
	}
	main0 := r.Head()
	c1, _ := r.Commit(main0, map[string][]byte{"a/x.yaml": []byte("x\n")}, "change")
	l1, _ := r.Commit(r.LedgerHead(), map[string][]byte{"messages/1": []byte("m1 1\n")}, "record")
	if err := r.PushRefs(context.Background(), Move{main0, c1}, Move{r.LedgerHead(), l1}); !errors.Is(err, ErrNoAtomic) {
		t.Fatalf("push of two refs: %v, want ErrNoAtomic", err)
	}
	out, _ := srv.Output("gitops.git", "for-each-ref", "--format=%(refname) %(objectname)")
	if !strings.Contains(out, "refs/heads/main "+main0.String()) || strings.Contains(out, "ledger") {
		t.Fatalf("refs moved:\n%s", out)
	}
}

// TestLedgerAlonePushHoldsOnlyOnTheBranchDecidedOn: a push that moves the
// ledger alone still checks the branch: moved by someone else since, the
// push is a lost race and the ledger does not move.
func TestLedgerAlonePushHoldsOnlyOnTheBranchDecidedOn(t *testing.T) {
	srv, url := startServer(t)
	r := openWithLedger(t, url)
	ctx := context.Background()
	main0 := r.Head()
	l1, _ := r.Commit(plumbing.ZeroHash, map[string][]byte{"messages/1": []byte("m1 1\n")}, "record")
	if err := r.PushRefs(ctx, Move{main0, main0}, Move{plumbing.ZeroHash, l1}); err != nil {
		t.Fatalf("the ledger alone on an unchanged branch: %v", err)
	}
	if err := srv.WriteFile("gitops.git", "main", "a/hand.yaml", "by hand\n", "a hand edit"); err != nil {
		t.Fatal(err)
	}
	l2, _ := r.Commit(l1, map[string][]byte{"messages/2": []byte("m2 2\n")}, "record 2")
	if err := r.PushRefs(ctx, Move{main0, main0}, Move{l1, l2}); !IsConflict(err) {
		t.Fatalf("the ledger alone on a branch moved since: %v, want a lost race", err)
	}
	out, _ := srv.Output("gitops.git", "rev-parse", "tenant-worker/ledger")
	if strings.TrimSpace(out) != l1.String() {
		t.Fatalf("the ledger moved to %s", out)
	}
}

// TestPushOfCommitsNotRemembered: commits whose objects this Repo no longer
// remembers (written before a compaction) are pushed with the objects
// found by walking, on both branches, and the server's fsck passes.
func TestPushOfCommitsNotRemembered(t *testing.T) {
	srv, url := startServer(t)
	r := openWithLedger(t, url)
	ctx := context.Background()
	main0 := r.Head()
	c1, _ := r.Commit(main0, map[string][]byte{"a/x.yaml": []byte("x\n"), "d/e/f.yaml": []byte("f\n")}, "change")
	l1, _ := r.Commit(plumbing.ZeroHash, map[string][]byte{"messages/1": []byte("m1 1\n")}, "record")
	r.mu.Lock()
	r.written = nil
	r.mu.Unlock()
	if err := r.PushRefs(ctx, Move{main0, c1}, Move{plumbing.ZeroHash, l1}); err != nil {
		t.Fatal(err)
	}
	if out, err := srv.Output("gitops.git", "fsck", "--strict"); err != nil {
		t.Fatalf("fsck: %v %s", err, out)
	}
	out, _ := srv.Output("gitops.git", "for-each-ref", "--format=%(refname) %(objectname)")
	if !strings.Contains(out, "refs/heads/main "+c1.String()) || !strings.Contains(out, "refs/heads/tenant-worker/ledger "+l1.String()) {
		t.Fatalf("refs:\n%s", out)
	}
}

// TestLedgerCommitKeptThroughCompaction: a batch that lost the race
// refetches, makes its change again on the new head and pushes it with the
// ledger commit it made before (on the ledger's head, or as the branch's
// first commit). The refetch leaves the clone whole even when a compaction
// is due, so the old head and that commit stay readable, and the push
// carries both; the push then compacts, and what nobody pushed (the
// batch's commit on the old head, a failed job's ledger commit) goes.
func TestLedgerCommitKeptThroughCompaction(t *testing.T) {
	for _, first := range []bool{false, true} {
		t.Run(map[bool]string{false: "on the ledger's head", true: "the ledger's first commit"}[first], func(t *testing.T) {
			srv, url := startServer(t)
			r := openWithLedger(t, url)
			ctx := context.Background()
			main0 := r.Head()
			var l1 plumbing.Hash
			if !first {
				var err error
				if l1, err = r.Commit(plumbing.ZeroHash, map[string][]byte{"messages/1": []byte("m1\n")}, "record 1"); err != nil {
					t.Fatal(err)
				}
				if err := r.PushRefs(ctx, Move{main0, main0}, Move{plumbing.ZeroHash, l1}); err != nil {
					t.Fatal(err)
				}
			}
			c1, err := r.Commit(main0, map[string][]byte{"a/x.yaml": []byte("x\n")}, "change")
			if err != nil {
				t.Fatal(err)
			}
			l2, err := r.Commit(l1, map[string][]byte{"messages/2": []byte("m2\n")}, "record 2")
			if err != nil {
				t.Fatal(err)
			}
			// A job that failed its checks left this one on the ledger's head.
			failed, err := r.Commit(l1, map[string][]byte{"messages/3": []byte("m3\n")}, "record 3")
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.WriteFile("gitops.git", "main", "b/other.yaml", "other\n", "another writer"); err != nil {
				t.Fatal(err)
			}
			if err := r.PushRefs(ctx, Move{main0, c1}, Move{l1, l2}); !IsConflict(err) {
				t.Fatalf("push: %v, want a lost race", err)
			}
			r.compactEvery = 1 // a compaction is due, as at the 500th new head
			head, err := r.Refetch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Touches(main0, head, NewReads()); err != nil {
				t.Fatalf("the old head after the refetch: %v", err)
			}
			c2, err := r.Commit(head, map[string][]byte{"a/x.yaml": []byte("x\n")}, "change")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.PushRefs(ctx, Move{head, c2}, Move{l1, l2}); err != nil {
				t.Fatalf("push of the change made again, with the ledger commit made before the fetch: %v", err)
			}
			if r.heads != 0 {
				t.Fatal("the push did not compact the clone: the test tests nothing")
			}
			for name, c := range map[string]plumbing.Hash{"the batch's commit on the old head": c1, "a failed job's ledger commit": failed} {
				if _, ok := r.written[c]; ok {
					t.Errorf("%s, which nobody pushed, is still tracked", name)
				}
				if err := r.repo.Storer.HasEncodedObject(c); err == nil {
					t.Errorf("%s, which nobody pushed, is still stored", name)
				}
			}
			if got, err := srv.Output("gitops.git", "show", "tenant-worker/ledger:messages/2"); err != nil || got != "m2\n" {
				t.Errorf("ledger branch: messages/2 = %q (%v)", got, err)
			}
			if out, err := srv.Output("gitops.git", "fsck", "--strict", "--no-dangling"); err != nil {
				t.Errorf("fsck: %v %s", err, out)
			}
		})
	}
}
