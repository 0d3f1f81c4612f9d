package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestATenantsRecordsShareAGroup: every key about one tenant (its
// existence, its release in any tier, an onboarding held for it) is in the
// group of its id, so that an onboarding writes one target file; a tier's
// and an environment's records are in their keys' groups.
func TestATenantsRecordsShareAGroup(t *testing.T) {
	home := targetPath(Tenant("t1"))
	for _, k := range []string{Release("t1"), ReleaseIn("basic", "t1"), ReleaseIn("premium", "t1"), HeldIn("advanced", "t1"), ReleaseIn("a tier", "t1")} {
		if p := targetPath(k); p != home {
			t.Errorf("%s is in %s, want its tenant's %s", k, p, home)
		}
	}
	for _, k := range []string{Tenant("t2"), Tier("t1"), Env("t1")} {
		if p := targetPath(k); p == home {
			t.Errorf("%s is in t1's group", k)
		}
	}
	if targetPath(Tier("basic")) != keyTargetPath(Tier("basic")) || targetPath(Env("pool-1")) != keyTargetPath(Env("pool-1")) {
		t.Error("a tier's or an environment's record moved")
	}
	// A name of any form has one group: what Set writes, Get finds after
	// the commit.
	tr := newTree()
	l := Open(tr)
	keys := []string{Tenant(""), Release(""), ReleaseIn("", ""), HeldIn("a/b", "c"), ReleaseIn("a tier", "x y"), Env("pool%1"), Tier("")}
	for i, k := range keys {
		l.Set(k, int64(10+i), "v")
	}
	l = commit(t, l, tr)
	for i, k := range keys {
		if r, ok := l.Get(k); !ok || r != (Record{MS: int64(10 + i), Value: "v"}) {
			t.Errorf("%q read back as %+v %v", k, r, ok)
		}
	}
}

// TestEarlierTargetPathsAreReadAndMoved: versions before 2026-12-05 kept
// a record at targets/<h0h1>/<h2h3>, and versions until 2026-12-06 at
// targets/<h0>/<h1>/<h2>/<h3> by the hash of the whole key. Their records
// must still count (a late message stays stale across the upgrade), also
// those that a replica of an earlier version writes there after a move; a
// record written again lives in its tenant's group alone, and the other
// records of the file it left stay where they are.
func TestEarlierTargetPathsAreReadAndMoved(t *testing.T) {
	t1, r1 := Tenant("t1"), ReleaseIn("basic", "t1")
	home, former, keyed := targetPath(t1), formerTargetPath(t1), keyTargetPath(r1)
	t2 := sharingKey(t, t1, home) // another key of t1's earlier groups
	if len(map[string]bool{home: true, former: true, keyed: true, keyTargetPath(t1): true}) != 4 || targetPath(r1) != home {
		t.Fatalf("paths %s, %s, %s", home, former, keyed)
	}
	tr := newTree()
	tr.files[former] = fmt.Appendf(nil, "# an earlier version's group\n%s 100\n%s 50 1.0\n", t1, t2)
	tr.files[keyed] = fmt.Appendf(nil, "# a later one's\n%s 90 0.0\n", r1)

	l := Open(tr)
	if !l.Stale(t1, 99) || l.Stale(t1, 100) {
		t.Fatal("the former group's record does not count")
	}
	if r, _ := l.Get(r1); r != (Record{MS: 90, Value: "0.0"}) {
		t.Fatalf("the key's group's record: %+v", r)
	}
	if c := l.Changes(); len(c) != 0 {
		t.Fatalf("a group only read was written: %v", slices.Collect(maps.Keys(c)))
	}
	l.Touch(t1, 120)
	c := l.Changes()
	if len(c) != 2 || c[home] == nil || c[former] == nil {
		t.Fatalf("changes %v, want %s and %s written", slices.Collect(maps.Keys(c)), home, former)
	}
	if _, body, _ := strings.Cut(string(c[home]), "\n"); body != t1+" 120\n" || !strings.Contains(string(c[home]), "tenant's id") {
		t.Fatalf("t1's group:\n%s", c[home])
	}
	if _, body, _ := strings.Cut(string(c[former]), "\n"); body != t2+" 50 1.0\n" {
		t.Fatalf("the former group keeps:\n%s\nwant t2's record alone", c[former])
	}
	l = commit(t, l, tr)
	if r, ok := l.Get(t2); !ok || r != (Record{MS: 50, Value: "1.0"}) {
		t.Fatalf("the former group's other record: %+v %v", r, ok)
	}
	l.Set(r1, 130, "1.0")
	if c := l.Changes(); len(c) != 2 || c[home] == nil || c[keyed] != nil {
		t.Fatalf("changes %v, want %s written and %s deleted", slices.Collect(maps.Keys(c)), home, keyed)
	}
	l = commit(t, l, tr)
	if _, ok := tr.files[keyed]; ok {
		t.Fatal("an emptied group of the key is still in the tree")
	}
	if r, _ := l.Get(t1); r.MS != 120 {
		t.Fatalf("t1's record %+v", r)
	}

	// A replica of an earlier version, still running, writes at its paths
	// again: every file is read, the newer record wins, and at the same
	// send time the earlier version's value.
	tr.files[former] = fmt.Appendf(nil, "%s 140\n%s 50 1.0\n", t1, t2)
	tr.files[keyed] = fmt.Appendf(nil, "%s 130 2.0\n", r1)
	l = Open(tr)
	if r, _ := l.Get(t1); r.MS != 140 {
		t.Fatalf("t1's record %+v: the former replica's newer record is lost", r)
	}
	if r, _ := l.Get(r1); r != (Record{MS: 130, Value: "2.0"}) {
		t.Fatalf("r1's record %+v", r)
	}
	l.Touch(t1, 135) // older than the former file's: nothing
	l.Set(r1, 130, "3.0")
	l = commit(t, l, tr)
	if r, _ := l.Get(t1); r.MS != 140 {
		t.Fatalf("t1's record %+v after an older touch", r)
	}
	if r, _ := l.Get(r1); r != (Record{MS: 130, Value: "3.0"}) {
		t.Fatalf("r1's record %+v after the set", r)
	}
	if _, ok := tr.files[keyed]; ok {
		t.Fatal("r1's record stays in the key's group")
	}

	// A corrupt group at any of a record's paths is an error, and nothing
	// of the record is written.
	tr.files[former] = []byte("not a record line at all\n")
	l = Open(tr)
	l.Touch(t1, 200)
	if !IsCorrupt(l.Err()) {
		t.Fatalf("err %v, want corrupt", l.Err())
	}
	if c := l.Changes(); len(c) != 0 {
		t.Fatalf("a record with a corrupt earlier file was written: %v", slices.Collect(maps.Keys(c)))
	}
}

// sharingKey is a Tenant key whose whole key has the same bucket as k's
// (so the same keyTargetPath and formerTargetPath), and whose own group is
// none of avoid's paths.
func sharingKey(t *testing.T, k string, avoid ...string) string {
	t.Helper()
	return tenantWhere(t, func(c string) bool { return bucket(c) == bucket(k) && !slices.Contains(avoid, targetPath(c)) })
}

// tenantWhere is the first Tenant key of a numbered name that ok accepts.
func tenantWhere(t *testing.T, ok func(k string) bool) string {
	t.Helper()
	for i := range 5_000_000 {
		if k := Tenant(fmt.Sprint("k", i)); ok(k) {
			return k
		}
	}
	t.Fatal("no key found")
	return ""
}

// TestPruneLeavesNoOlderCopyBehind: a record at two of its places (the
// state replicas of two versions running at once leave: the former path
// written again after a move) must not go back in time when a commit
// prunes one of those files: the older copy, in a file no commit touched,
// would become the record again, and a used-up held onboarding would be
// held again. (Found by review: the versions before merged both files
// into one group and pruned them together.)
func TestPruneLeavesNoOlderCopyBehind(t *testing.T) {
	k := HeldIn("premium", "t1")
	keyed, former := keyTargetPath(k), formerTargetPath(k)
	other := sharingKey(t, k, keyed) // shares k's former file
	tr := newTree()
	// The version of 2026-12-05 wrote the held onboarding; a replica before
	// 2026-12-05, still running, later used it up and wrote other.
	tr.files[keyed] = fmt.Appendf(nil, "# 2026-12-05 version\n%s 10 1.0,10\n", k)
	tr.files[former] = fmt.Appendf(nil, "# before 2026-12-05\n%s 20\n%s 5\n", k, other)

	l := Open(tr)
	if r, _ := l.Get(k); r != (Record{MS: 20}) {
		t.Fatalf("record before: %+v", r)
	}
	l.Set(other, 1000, "") // moves other out of the former file
	l.Prune(100)           // both copies of k are older than the retention
	if r, ok := l.Get(k); ok && r.MS < 20 {
		t.Errorf("after Prune, in the same ledger, k went back to %+v (was MS 20, used up)", r)
	}
	l = commit(t, l, tr)
	if r, ok := l.Get(k); ok && r.MS < 20 {
		t.Errorf("after the commit k is %+v: an older record than the one the ledger held (MS 20, used up) is back; files:\n%s:\n%s%s:\n%s",
			r, keyed, tr.files[keyed], former, tr.files[former])
	}
}

// TestRewrittenEarlierFileSaysWhatItHolds: each group file's first line
// says what it holds (package doc). A file of the 2026-12-05 layout that a
// record moves out of still holds records of keys whose whole key, not
// tenant, hashes to its digits: its header says so, and a tenant's file
// that holds none does not.
func TestRewrittenEarlierFileSaysWhatItHolds(t *testing.T) {
	t1 := Tenant("t1")
	keyed := keyTargetPath(t1)
	other := sharingKey(t, t1, keyed) // another key of t1's 2026-12-05 file
	tr := newTree()
	tr.files[keyed] = fmt.Appendf(nil, "# tenant-worker ledger: targets whose key's sha256 starts %s: ...\n%s 10\n%s 10\n",
		bucket(t1), t1, other)
	l := Open(tr)
	l.Touch(t1, 20) // t1's record moves to its tenant's file
	b := l.Changes()[keyed]
	if b == nil {
		t.Fatalf("%s not rewritten", keyed)
	}
	header, body, _ := strings.Cut(string(b), "\n")
	if body != other+" 10\n" || !strings.Contains(header, "whole key's does") {
		t.Errorf("%s:\n%s\nwant other's record, and a header that says it is there by its whole key", keyed, b)
	}
	home := l.Changes()[targetPath(t1)]
	if header, _, _ := strings.Cut(string(home), "\n"); !strings.Contains(header, "tenant's id") || strings.Contains(header, "whole key's does") {
		t.Errorf("t1's group says %q", header)
	}
}

// homedAt is a Tenant key whose own group (targetPath, by the id's hash)
// is p, and none of whose places is one of avoid.
func homedAt(t *testing.T, p string, avoid ...string) string {
	t.Helper()
	return tenantWhere(t, func(k string) bool {
		return targetPath(k) == p && !slices.Contains(avoid, keyTargetPath(k)) && !slices.Contains(avoid, formerTargetPath(k))
	})
}

// placesOf are the paths of k's places.
func placesOf(k string) []string {
	return []string{targetPath(k), keyTargetPath(k), formerTargetPath(k)}
}

// TestPruneReadsAnExpiredRecordsEarlierPlaces: the prune of another
// tenant's expired record in t1's group looks it up at its earlier places,
// where a copy would answer again once the record is gone: a corrupt file
// there is an error, as for a message's own records, and is not written.
func TestPruneReadsAnExpiredRecordsEarlierPlaces(t *testing.T) {
	t1 := Tenant("t1")
	home := targetPath(t1)
	other := homedAt(t, home, placesOf(t1)...) // shares t1's group, not its other places
	tr := newTree()
	tr.files[home] = fmt.Appendf(nil, "%s 5\n", other)           // expired at 100
	tr.files[formerTargetPath(other)] = []byte("not a record\n") // a hand edit gone wrong
	l := Open(tr)
	l.Touch(t1, 1000)
	if err := l.Err(); err != nil {
		t.Fatalf("setup: t1's own files do not read: %v", err)
	}
	l.Prune(100)
	if err := l.Err(); !IsCorrupt(err) || !strings.Contains(err.Error(), formerTargetPath(other)) {
		t.Errorf("err %v, want the corrupt former file of %s, whose expired record the prune drops", err, other)
	}
	if c := l.Changes(); c[formerTargetPath(other)] != nil {
		t.Error("the corrupt file is written")
	}
}

// keyTargetPath and formerTargetPath are target's earlier paths (see
// earlierTargetPaths).
func keyTargetPath(target string) string {
	p, _ := earlierTargetPaths(target)
	return p
}

func formerTargetPath(target string) string {
	_, p := earlierTargetPaths(target)
	return p
}
