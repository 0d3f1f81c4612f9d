package gitrepo

import (
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestTouchesFollowsWhatWasRead: reads made on one commit, then another
// writer's change: Touches says whether any read would come out otherwise.
func TestTouchesFollowsWhatWasRead(t *testing.T) {
	r, base := withCommit(t, map[string][]byte{
		"notes/one.txt":          []byte("1\n"),
		"notes/two.txt":          []byte("2\n"),
		"tiers/premium/t1.yaml":  []byte("t1\n"),
		"tiers/premium/deep/x":   []byte("x\n"),
		"infra/platform.yaml":    []byte("p\n"),
		"infra/sub/listed.yaml":  []byte("l\n"),
		"walked/a.yaml":          []byte("a\n"),
		"walked/inner/b.yaml":    []byte("b\n"),
		"untouched/inner/c.yaml": []byte("c\n"),
	})
	// What a plan of the kind the worker makes reads: a file, a folder's
	// names, a folder's entries with contents, a folder by hash, and a
	// file that is not there.
	read := func(reads *Reads) {
		snap, err := r.Snapshot(base)
		if err != nil {
			t.Fatal(err)
		}
		s := snap.Recording(reads)
		_, _ = s.ReadFile("infra/platform.yaml")
		_, _ = s.ReadDir("notes")
		_, _ = s.ReadDir("infra/sub")
		_ = s.WalkFiles("walked", func(string, []byte) error { return nil })
		_, _ = s.DirHash("tiers/premium")
		_, _ = s.ReadFile("infra/missing.yaml")
		_, _ = s.ReadFile("untouched/inner/c.yaml")
	}
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  bool
	}{
		{"a listed folder's file changes content", map[string][]byte{"notes/one.txt": []byte("edit\n")}, false},
		{"a listed folder gains a file", map[string][]byte{"notes/three.txt": []byte("3\n")}, true},
		{"a listed folder loses a file", map[string][]byte{"notes/two.txt": nil}, true},
		{"a file read changes", map[string][]byte{"infra/platform.yaml": []byte("q\n")}, true},
		{"a file read as absent appears", map[string][]byte{"infra/missing.yaml": []byte("m\n")}, true},
		{"a file beside a file read changes", map[string][]byte{"infra/other.yaml": []byte("o\n")}, false},
		{"a folder read by hash changes deep down", map[string][]byte{"tiers/premium/deep/x": []byte("y\n")}, true},
		{"a walked folder's file changes", map[string][]byte{"walked/inner/b.yaml": []byte("c\n")}, true},
		{"a folder above a file read goes", map[string][]byte{"untouched/inner": nil}, true},
		{"a folder above a file read gains a file", map[string][]byte{"untouched/inner/d.yaml": []byte("d\n")}, false},
		{"a new top-level folder", map[string][]byte{"elsewhere/z.txt": []byte("z\n")}, false},
		{"a file read turns into a folder", map[string][]byte{"infra/platform.yaml": nil, "infra/platform.yaml/x": []byte("x\n")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other, err := r.Commit(base, tc.files, "other writer\n")
			if err != nil {
				t.Fatal(err)
			}
			reads := NewReads()
			read(reads)
			got, err := r.Touches(base, other, reads)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Touches = %v, want %v", got, tc.want)
			}
		})
	}

	// Nothing recorded: no change touches it; the root read by hash: any.
	other, err := r.Commit(base, map[string][]byte{"notes/one.txt": []byte("edit\n")}, "other writer\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Touches(base, other, NewReads()); got || err != nil {
		t.Errorf("nothing read: Touches = %v, %v", got, err)
	}
	root := NewReads()
	root.Whole("")
	if got, err := r.Touches(base, other, root); !got || err != nil {
		t.Errorf("the whole tree read: Touches = %v, %v", got, err)
	}
	// A snapshot that records nothing reads as before.
	snap, _ := r.Snapshot(base)
	if _, err := snap.ReadFile("notes/one.txt"); err != nil {
		t.Fatal(err)
	}
}

// TestTouchesSeesAFolderTheWriteEmpties: the pipeline records reads made on
// its own commits (base plus what it writes) and asks Touches(base, head)
// about them. A commit that deletes the last file of a folder drops the
// folder (as git does), so what a listing of the folder's parent says on
// the batch's commit depends on whether another writer left anything in
// that folder: Written records the folders above a deletion as listed, so
// that such a change counts. (Found by review: no plan deletes without
// listing the folder today, but a rebase must not depend on that.)
func TestTouchesSeesAFolderTheWriteEmpties(t *testing.T) {
	r, base := withCommit(t, map[string][]byte{
		"tier/kustomization.yaml": []byte("resources: []\n"),
		"tier/shard-03/t1.yaml":   []byte("t1\n"),
	})
	write := map[string][]byte{"tier/shard-03/t1.yaml": nil} // the batch's change
	reads := NewReads()
	reads.Written(write) // as batch.advance records it
	mine, err := r.Commit(base, write, "offboard t1\n")
	if err != nil {
		t.Fatal(err)
	}
	list := func(c string, s *Snapshot) []string {
		names, err := s.ReadDir("tier")
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		return names
	}
	snap, _ := r.Snapshot(mine)
	before := list("the batch's commit", snap.Recording(reads)) // a later job lists the tier on it

	// Another writer puts a file in the folder the batch empties.
	head, err := r.Commit(base, map[string][]byte{"tier/shard-03/t7.yaml": []byte("t7\n")}, "other writer\n")
	if err != nil {
		t.Fatal(err)
	}
	touched, err := r.Touches(base, head, reads)
	if err != nil {
		t.Fatal(err)
	}
	rebased, err := r.Commit(head, write, "offboard t1\n")
	if err != nil {
		t.Fatal(err)
	}
	snap, _ = r.Snapshot(rebased)
	after := list("the rebased commit", snap)
	if !touched && !slices.Equal(before, after) {
		t.Fatalf("Touches = false, but the listing of tier read on the batch's commit was %v and is %v on the rebased one", before, after)
	}
}

// withCommit is a clone of a served repository with a commit of files on
// its head, not pushed.
func withCommit(t *testing.T, files map[string][]byte) (*Repo, plumbing.Hash) {
	t.Helper()
	_, url := startServer(t)
	r, err := open(t, url, t.TempDir(), token)
	if err != nil {
		t.Fatal(err)
	}
	base, err := r.Commit(r.Head(), files, "base\n")
	if err != nil {
		t.Fatal(err)
	}
	return r, base
}
