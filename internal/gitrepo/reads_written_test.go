package gitrepo

import (
	"slices"
	"testing"
)

// TestTouchesSeesAFolderTheWriteEmpties: the pipeline records reads made on
// its own commits (base plus what it writes) and asks Touches(base, head)
// about them. A commit that deletes the last file of a folder drops the
// folder (as git does), so what a listing of the folder's parent says on
// the batch's commit depends on whether another writer left anything in
// that folder: Written records the folders above a deletion as listed, so
// that such a change counts. (Found by review: no plan deletes without
// listing the folder today, but a rebase must not depend on that.)
func TestTouchesSeesAFolderTheWriteEmpties(t *testing.T) {
	_, url := startServer(t)
	r, err := open(t, url, t.TempDir(), token)
	if err != nil {
		t.Fatal(err)
	}
	base, err := r.Commit(r.Head(), map[string][]byte{
		"tier/kustomization.yaml": []byte("resources: []\n"),
		"tier/shard-03/t1.yaml":   []byte("t1\n"),
	}, "base\n")
	if err != nil {
		t.Fatal(err)
	}
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
