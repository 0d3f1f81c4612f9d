package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestFormerTargetsFoldersAreReadAndMoved: versions before 2026-12-05 kept
// a target's group at targets/<h0h1>/<h2h3>. Their records must still
// count (a late message stays stale across the upgrade), also those that a
// replica of the former version writes there after the group moved, and a
// group written again lives at its new path alone.
func TestFormerTargetsFoldersAreReadAndMoved(t *testing.T) {
	t1 := Tenant("t1")
	var t2 string // another target of t1's group
	for i := 0; t2 == ""; i++ {
		if k := Tenant(fmt.Sprint("other-", i)); bucket(k) == bucket(t1) {
			t2 = k
		}
	}
	former, now := formerTargetPath(t1), targetPath(t1)
	if former == now || !strings.HasPrefix(former, "targets/"+bucket(t1)[:2]+"/") {
		t.Fatalf("paths %s and %s", former, now)
	}
	tr := newTree()
	tr.files[former] = fmt.Appendf(nil, "# an earlier version's group\n%s 100\n%s 50 1.0\n", t1, t2)

	l := Open(tr)
	if !l.Stale(t1, 99) || l.Stale(t1, 100) {
		t.Fatal("the former group's record does not count")
	}
	if c := l.Changes(); len(c) != 0 {
		t.Fatalf("a group only read was written: %v", slices.Collect(maps.Keys(c)))
	}
	l.Touch(t1, 120)
	c := l.Changes()
	if len(c) != 2 || c[now] == nil || c[former] != nil {
		t.Fatalf("changes %v, want %s written and %s deleted", slices.Collect(maps.Keys(c)), now, former)
	}
	lines := []string{t1 + " 120", t2 + " 50 1.0"}
	slices.Sort(lines)
	if want := strings.Join(lines, "\n") + "\n"; !strings.HasSuffix(string(c[now]), "\n"+want) {
		t.Fatalf("moved group:\n%s\nwant its records:\n%s", c[now], want)
	}
	if _, ok := c[former]; !ok {
		t.Fatal("the former group is not deleted")
	}
	l = commit(t, l, tr)
	if _, ok := tr.files[former]; ok {
		t.Fatal("the former group is still in the tree")
	}
	if r, ok := l.Get(t2); !ok || r != (Record{MS: 50, Value: "1.0"}) {
		t.Fatalf("the moved group's other record: %+v %v", r, ok)
	}

	// A replica of the former version, still running, writes the group at
	// its former path again: both files are read, the newer record wins.
	tr.files[former] = fmt.Appendf(nil, "%s 130\n%s 40\n", t1, t2)
	l = Open(tr)
	if r, _ := l.Get(t1); r.MS != 130 {
		t.Fatalf("t1's record %+v: the former replica's newer record is lost", r)
	}
	if r, _ := l.Get(t2); r != (Record{MS: 50, Value: "1.0"}) {
		t.Fatalf("t2's record %+v: an older line of the former file won", r)
	}
	l.Touch(t2, 60)
	l = commit(t, l, tr)
	if _, ok := tr.files[former]; ok {
		t.Fatal("the former group is still in the tree after a second move")
	}
	if r, _ := l.Get(t1); r.MS != 130 {
		t.Fatalf("t1's record %+v after the second move", r)
	}

	// A corrupt former group is an error, and nothing of the group is written.
	tr.files[former] = []byte("not a record line at all\n")
	l = Open(tr)
	l.Touch(t1, 200)
	if !IsCorrupt(l.Err()) {
		t.Fatalf("err %v, want corrupt", l.Err())
	}
	if c := l.Changes(); len(c) != 0 {
		t.Fatalf("a group with a corrupt former file was written: %v", slices.Collect(maps.Keys(c)))
	}
}
