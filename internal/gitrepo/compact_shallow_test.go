package gitrepo

import (
	"context"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestCompactedCloneReadsARevertedLedger.
//
// Found by review: compaction keeps only the two heads' commits and trees, not
// their history, but the clone still tells the server it has those heads,
// and a server whose objects are packed (git gc or repack, with or without
// bitmaps: both fail here with git 2.39; Gitea runs gc) counts objects
// reachable from their ancestors as held by the client. A commit that brings
// back an older tree (the revert of a hand edit, the fix the guarantees ask
// for after "someone edits the ledger by hand") then arrives without that
// tree, and Snapshot reads the missing folder as absent (subtree turns any
// read error into fs.ErrNotExist): here the hour folder of the ledger
// holding m1 reads as empty after the revert, so m1 is no longer a
// duplicate. The same happens on the branch Flux reads (a reverted
// offboarding's tier folder).
//
// The first fetch fails in the compaction it starts ("object not found"),
// the next one succeeds with the tree still missing.
//
// Expected: after a fetch the clone reads every file of both heads as the
// server has them (or fails loudly); never a present file as absent.
func TestCompactedCloneReadsARevertedLedger(t *testing.T) {
	srv, url := startServer(t)
	r := openWithLedger(t, url)
	r.compactEvery = 1 // compact after every new head, as a long-lived clone does after 500
	ctx := context.Background()
	group := "messages/2026120100/ab"
	main0 := r.Head()
	l1, err := r.Commit(plumbing.ZeroHash, map[string][]byte{group: []byte("m1 1\n"), "README": []byte("ledger\n")}, "record m1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PushRefs(ctx, Move{main0, main0}, Move{plumbing.ZeroHash, l1}); err != nil {
		t.Fatal(err)
	}
	// A hand edit, fetched by the worker (whose clone is then compacted).
	l2, err := r.Commit(l1, map[string][]byte{group: []byte("m1 garbage\n")}, "hand edit")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PushRefs(ctx, Move{main0, main0}, Move{l1, l2}); err != nil {
		t.Fatal(err)
	}
	// On the server: the edit is reverted (the group's folder is the tree
	// of l1 again) in a commit that also adds a file, and the repository is
	// repacked with bitmaps, as git gc does.
	git := func(args ...string) string {
		t.Helper()
		out, err := srv.Output("gitops.git", args...)
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(out)
	}
	git("update-ref", "refs/heads/tmp", l1.String())
	if err := srv.WriteFile("gitops.git", "tmp", "notes/fixed", "reverted the hand edit\n", "tmp"); err != nil {
		t.Fatal(err)
	}
	l3 := git("commit-tree", git("rev-parse", "tmp^{tree}"), "-p", l2.String(), "-m", "Revert the hand edit")
	git("update-ref", "refs/heads/tenant-worker/ledger", l3, l2.String())
	git("update-ref", "-d", "refs/heads/tmp")
	git("repack", "-a", "-d", "-b")

	if _, err := r.Fetch(ctx); err != nil {
		// The compaction this fetch starts meets the missing tree; the
		// fetch fails once, and the next one (the pipeline's next attempt)
		// succeeds with the tree still missing.
		t.Logf("fetch: %v", err)
		if _, err := r.Fetch(ctx); err != nil {
			t.Fatalf("fetch again: %v", err)
		}
	}
	if r.LedgerHead().String() != l3 {
		t.Fatalf("ledger head %s, want %s", r.LedgerHead(), l3)
	}
	snap, err := r.Snapshot(r.LedgerHead())
	if err != nil {
		t.Fatalf("open the reverted ledger: %v", err)
	}
	got, err := snap.ReadFile(group)
	if err != nil || string(got) != "m1 1\n" {
		t.Fatalf("the reverted ledger's %s reads %q, %v; the server has %q", group, got, err, "m1 1\n")
	}
}

// TestCompactedReplicaReadsAFolderBroughtBack.
//
// Found by review: the same hole on the branch Flux reads, in normal operation with
// two replicas: replica A offboards a tenant (the folder loses its file),
// replica B fetches that head and compacts its clone, and A then onboards
// the tenant again with the same bytes, which brings back a folder tree
// that the server counts as held by B (reachable from B's head's
// ancestors). B's fetch fails once in its compaction ("object not found"),
// then reads the folder as absent: a tier folder that does not exist, a
// kustomization that cannot be read, a branch that "does not build" (a
// pause that no fix of the repository ends), until a restart with a memory
// clone; a disk clone keeps the hole.
//
// Expected: after a fetch, every file of the head reads as the server has it.
func TestCompactedReplicaReadsAFolderBroughtBack(t *testing.T) {
	srv, url := startServer(t)
	ctx := context.Background()
	a := openWithLedger(t, url)
	b := openWithLedger(t, url)
	b.compactEvery = 1
	h0 := a.Head()
	c1, err := a.Commit(h0, map[string][]byte{"a/one.yaml": nil}, "Removing tenant one")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Push(ctx, h0, c1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fetch(ctx); err != nil || b.Head() != c1 {
		t.Fatalf("replica b fetch: %v, head %s", err, b.Head())
	}
	c2, err := a.Commit(c1, map[string][]byte{"a/one.yaml": []byte("one\n"), "b/two.yaml": []byte("two, edited\n")}, "Adding tenant one again")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Push(ctx, c1, c2); err != nil {
		t.Fatal(err)
	}
	if out, err := srv.Output("gitops.git", "repack", "-a", "-d", "-b"); err != nil {
		t.Fatalf("repack: %v %s", err, out)
	}
	if _, err := b.Fetch(ctx); err != nil {
		t.Logf("replica b fetch: %v", err)
		if _, err := b.Fetch(ctx); err != nil {
			t.Fatalf("replica b fetch again: %v", err)
		}
	}
	snap, err := b.Snapshot(b.Head())
	if err != nil {
		t.Fatalf("open %s: %v", b.Head(), err)
	}
	if got, err := snap.ReadFile("a/one.yaml"); err != nil || string(got) != "one\n" {
		t.Fatalf("replica b reads a/one.yaml of %s as %q, %v; the server has %q", b.Head(), got, err, "one\n")
	}
}
