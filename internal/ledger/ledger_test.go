package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is a send time: 2026-12-03 14:25:00 UTC.
var t0 = time.Date(2026, 12, 3, 14, 25, 0, 0, time.UTC).UnixMilli()

func TestRulesAndRoundTrip(t *testing.T) {
	l := Open(nil)
	l.Touch(Tenant("t1"), 100)
	l.Set(Tier("basic"), 50, "1.0")
	l.Note("m1", t0)
	l.Note("m0", t0-hourMS)
	if l.Stale(Tenant("t1"), 100) || !l.Stale(Tenant("t1"), 99) || l.Stale(Tenant("t2"), 1) {
		t.Fatal("stale: equal times are not stale, older ones are, unknown targets never")
	}
	l.Touch(Tenant("t1"), 80) // never moves back
	if !l.Stale(Tenant("t1"), 99) {
		t.Fatal("a touch with an older time moved the record back")
	}
	l.Set(Tier("basic"), 50, "1.1") // same time, other value: the later call wins
	tr := newTree()
	back := commit(t, l, tr)
	if !back.Seen("m0", t0-hourMS) || !back.Seen("m1", t0) || back.Seen("m2", t0) {
		t.Fatal("seen")
	}
	if r, ok := back.Get(Tier("basic")); !ok || r != (Record{MS: 50, Value: "1.1"}) {
		t.Fatalf("tier record %+v %v", r, ok)
	}
	if r, ok := back.Get(Tenant("t1")); !ok || r != (Record{MS: 100}) {
		t.Fatalf("tenant record %+v %v", r, ok)
	}
	// What changes nothing writes nothing.
	back.Touch(Tenant("t1"), 100)
	back.Set(Tier("basic"), 50, "1.1")
	back.Note("m1", t0)
	if c := back.Changes(); len(c) != 0 {
		t.Fatalf("no change, yet changes: %v", c)
	}
	// A group read and written again is the same file.
	back.Touch(Tenant("t1"), 101)
	back.Touch(Tenant("t1"), 100)
	path := targetPath(Tenant("t1"))
	before := string(tr.files[path])
	third := commit(t, back, tr)
	if r, _ := third.Get(Tenant("t1")); r.MS != 101 {
		t.Fatalf("touch lost: %+v", r)
	}
	if after := string(tr.files[path]); after != strings.Replace(before, "tenant/t1 100\n", "tenant/t1 101\n", 1) {
		t.Fatalf("rewritten as\n%s\nwas\n%s", after, before)
	}
}

// TestLayout pins the tree's paths and the files' form.
func TestLayout(t *testing.T) {
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	l := Open(nil)
	l.Touch(Env("pool two"), 7)
	l.Note("m-1", t0)
	c := l.Changes()
	h := hash("env/pool%20two")                                           // the key as written
	tp := "targets/" + h[:1] + "/" + h[1:2] + "/" + h[2:3] + "/" + h[3:4] // one folder per hex digit
	mp := "messages/2026120314/2500"                                      // its 15 seconds (14:25:00-14)
	if len(c) != 2 || c[tp] == nil || c[mp] == nil {
		t.Fatalf("changes %v, want %s and %s", slices.Collect(maps.Keys(c)), tp, mp)
	}
	for p, want := range map[string]string{tp: "env/pool%20two 7\n", mp: "m-1 " + fmt.Sprint(t0) + "\n"} {
		header, rest, _ := strings.Cut(string(c[p]), "\n")
		if !strings.HasPrefix(header, "# tenant-worker ledger: ") || rest != want {
			t.Errorf("%s:\n%s", p, c[p])
		}
	}
	// Lines sorted, so that a change edits one line.
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		if k := Tenant(fmt.Sprint("t", i)); targetPath(k) == targetPath(Tenant("t0")) || i == 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	l = Open(nil)
	for i := len(keys) - 1; i >= 0; i-- {
		l.Touch(keys[i], int64(i))
	}
	_, body, _ := strings.Cut(string(l.Changes()[targetPath(keys[0])]), "\n")
	if want := keys[0] + " 0\n" + keys[1] + " 1\n" + keys[2] + " 2\n"; body != want {
		t.Errorf("group written as\n%s\nwant\n%s", body, want)
	}
}

// TestSeenIsExactByIDAndSendTime: a redelivered message carries its
// SentTimestamp, so it is found in the one group its hour and id name.
func TestSeenIsExactByIDAndSendTime(t *testing.T) {
	l := Open(nil)
	l.Note("m", t0)
	l.Note("n", t0+hourMS)
	l = commit(t, l, newTree())
	for _, c := range []struct {
		id   string
		sent int64
		want bool
	}{
		{"m", t0, true},
		{"n", t0 + hourMS, true},
		{"m", t0 + hourMS, false}, // another hour
		{"m", t0 + 1, false},      // same hour, another send time: another message
		{"n", t0, false},
		{"M", t0, false},
		{"m ", t0, false},
	} {
		if got := l.Seen(c.id, c.sent); got != c.want {
			t.Errorf("Seen(%q, %d) = %v", c.id, c.sent, got)
		}
	}
}

// TestOneMessageTouchesAHandfulOfFiles: with 100,000 ids over two days
// and 10,000 tenants, a message reads and writes the few files it names.
func TestOneMessageTouchesAHandfulOfFiles(t *testing.T) {
	now := t0
	tr := fill(t, 100_000, 48, now)
	l := Open(nil)
	for i := range 10_000 {
		l.Touch(Tenant(fmt.Sprint("tenant-", i)), now-int64(i))
	}
	l.Note("id-0", now-1) // already there: changes nothing
	tr.apply(t, l.Changes())
	// 48 hours of 240 groups of 15 seconds of about 9 ids, and the
	// targets' groups.
	if len(tr.files) < 15_000 {
		t.Fatalf("the tree holds %d files", len(tr.files))
	}

	if !Open(tr).Seen("id-7", now-1-7*hourMS) {
		t.Fatal("an id kept is not seen")
	}
	tr.reads = 0
	l = Open(tr)
	if tr.reads != 0 {
		t.Fatal("Open read the tree")
	}
	if l.Seen("new", now) {
		t.Fatal("seen")
	}
	l.Note("new", now)
	if tr.reads != 5 {
		t.Errorf("Seen and Note read %d files, want 5 (the groups of its 15 seconds, its second and its hundredth, and those versions before 2026-12-06 wrote of its hour and its minute, absent but the first, each once)", tr.reads)
	}
	l.Touch(Tenant("tenant-5"), now)
	l.Set(Release("tenant-5"), now, "")
	// The tenant's group, which both records share, and each record's two
	// paths of earlier versions (absent).
	if tr.reads > 10 {
		t.Errorf("%d files read for one message, want at most 10", tr.reads)
	}
	c := l.Changes()
	size := 0
	for _, b := range c {
		size += len(b)
	}
	if len(c) > 2 || size > 2000 { // the message's group and the tenant's
		t.Errorf("one message changes %d files, %d bytes: %v", len(c), size, slices.Collect(maps.Keys(c)))
	}
	if tr.lists != 1 {
		t.Errorf("listed %d folders without Prune, want 1 (the tenant's journal folder)", tr.lists)
	}
	back := commit(t, l, tr)
	if !back.Seen("new", now) || !back.Seen("id-99999", fillSent(99999, 100_000, 48, now)) || back.Stale(Tenant("tenant-5"), now) || !back.Stale(Tenant("tenant-6"), now-7) {
		t.Fatal("answers changed after the commit")
	}
}

// TestPruneDropsOldHoursAndOnlyRecordsInGroupsWritten: whole hour folders
// of messages go once their hour ends by the bound; old target records go
// only from the groups the commit writes anyway, and nothing else is read.
func TestPruneDropsOldHoursAndOnlyRecordsInGroupsWritten(t *testing.T) {
	hour := t0 - t0%hourMS // 14:00
	// Two tenants in one group, one in another.
	a, b := "", ""
	seen := map[string]string{}
	for i := 0; b == ""; i++ {
		k := Tenant(fmt.Sprint("t", i))
		if first, ok := seen[targetPath(k)]; ok {
			a, b = first, k
		}
		seen[targetPath(k)] = k
	}
	c := Tenant("elsewhere")
	if targetPath(c) == targetPath(a) {
		t.Fatal("pick another name")
	}
	l := Open(nil)
	l.Touch(a, hour)
	l.Touch(b, hour-10)            // old
	l.Touch(c, hour-10)            // old, in a group no commit touches
	l.Note("old", hour-2*hourMS+5) // 12:00-13:00: ends before the bound
	l.Note("edge", hour-hourMS)    // 13:00-14:00: ends at the bound
	l.Note("kept", hour+1)         // 14:00-15:00: holds the bound
	l.Note("new", hour+hourMS+1)   // 15:00
	tr := newTree()
	tr.files["messages/not-an-hour/x"] = []byte("x 1\n")
	l = commit(t, l, tr)

	tr.reads = 0
	l.Touch(a, hour+5)
	l.Prune(hour)
	l.Prune(hour) // lists once
	// a's group and its two paths of earlier versions, and those of b, whose
	// record the prune drops (a copy there would answer again); a's
	// journal folder, which b's group shares, and the messages.
	if tr.lists != 2 || tr.reads != 5 {
		t.Errorf("prune read %d files and listed %d folders, want 2 and 1", tr.reads-3, tr.lists-1)
	}
	changes := l.Changes()
	want := []string{"messages/2026120312", "messages/2026120313", targetPath(a)}
	if got := slices.Sorted(maps.Keys(changes)); !slices.Equal(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	if changes[want[0]] != nil || changes[want[1]] != nil {
		t.Fatal("hour folders not deleted")
	}
	if l.Seen("edge", hour-hourMS) {
		t.Error("seen in a pruned hour")
	}
	l.Note("late", hour-hourMS) // cannot be delivered again: not recorded
	back := commit(t, l, tr)
	if back.Seen("old", hour-2*hourMS+5) || back.Seen("edge", hour-hourMS) || back.Seen("late", hour-hourMS) ||
		!back.Seen("kept", hour+1) || !back.Seen("new", hour+hourMS+1) {
		t.Error("pruned the wrong hours")
	}
	if _, ok := back.Get(b); ok {
		t.Error("an old record in a group written anyway was kept")
	}
	if r, ok := back.Get(a); !ok || r.MS != hour+5 {
		t.Errorf("pruned a new record: %+v %v", r, ok)
	}
	if _, ok := back.Get(c); !ok {
		t.Error("pruned a group no commit wrote")
	}
	if _, ok := tr.files["messages/not-an-hour/x"]; !ok {
		t.Error("pruned a folder that is not an hour")
	}

	// A group left empty is deleted.
	back.Touch(c, hour-5)
	back.Prune(hour)
	if ch := back.Changes(); len(ch) != 1 || ch[targetPath(c)] != nil {
		t.Errorf("changes %v", ch)
	}
}

// TestCorruptGroup: a group that does not parse, or cannot be read, is an
// error the caller sees; the ledger answers as if it were empty, never
// panics, and never overwrites it.
func TestCorruptGroup(t *testing.T) {
	tr := newTree()
	tr.files[targetPath(Tenant("t1"))] = []byte("# header\ntenant/t1 soon\n")
	tr.files[windowPath(t0)] = []byte("m\n")
	l := Open(tr)
	if l.Err() != nil {
		t.Fatal("Open read")
	}
	if l.Stale(Tenant("t1"), 0) || l.Seen("m", t0) {
		t.Fatal("a corrupt group answered")
	}
	if err := l.Err(); !errors.Is(err, ErrCorrupt) || !IsCorrupt(err) || !strings.Contains(err.Error(), targetPath(Tenant("t1"))) {
		t.Fatalf("Err() = %v, want ErrCorrupt naming the group", err)
	}
	l.Touch(Tenant("t1"), 5)
	l.Note("m", t0)
	l.Touch(Tenant("t2"), 5)
	if c := l.Changes(); len(c) != 1 || c[targetPath(Tenant("t2"))] == nil {
		t.Fatalf("changes %v: a group not read was written", slices.Collect(maps.Keys(c)))
	}

	tr.fail = errors.New("disk on fire")
	l = Open(tr)
	l.Get(Tenant("t3"))
	l.Prune(t0)
	if err := l.Err(); err == nil || IsCorrupt(err) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Err() = %v", err)
	}
	for _, bad := range []string{"t1\n", "t1 soon\n", "t1 12 1.0 extra\n"} {
		tr := newTree()
		tr.files[targetPath("t1")] = []byte(bad)
		if l := Open(tr); l.Stale("t1", 0) || !IsCorrupt(l.Err()) {
			t.Errorf("%q: Err() = %v", bad, l.Err())
		}
	}
}

// TestAFullWindowOverflowsIntoItsSecond: once the group of a message's 15
// seconds holds groupLimit ids, a new message of those seconds goes to its
// second's group, and once that is full to its 10 milliseconds'; all are read
// by Seen, noting a message again writes nothing, Prune drops the hour with
// all of them, and a second's group that does not parse is an error, not
// an empty group.
func TestAFullWindowOverflowsIntoItsSecond(t *testing.T) {
	full := ids("m-", groupLimit)
	l := Open(nil)
	for _, id := range full {
		l.Note(id, t0+1) // 14:25:00.001: the window 2500, the second 00
	}
	tr := newTree()
	tr.apply(t, l.Changes())
	if len(tr.files) != 1 || tr.files[windowPath(t0)] == nil {
		t.Fatalf("%d ids of one window wrote %v, want %s alone", len(full), slices.Sorted(maps.Keys(tr.files)), windowPath(t0))
	}

	l = Open(tr)
	if !l.Seen(full[0], t0+1) || l.Seen(full[0], t0) {
		t.Fatal("an id of the full window: Seen wrong")
	}
	l.Note(full[0], t0+1)
	if c := l.Changes(); len(c) != 0 {
		t.Fatalf("noting a message the window holds writes %v", slices.Collect(maps.Keys(c)))
	}
	at := t0 + 14_999 // 14:25:14.999: the same window, the second 14
	l.Note("m-new", at)
	c := l.Changes()
	if len(c) != 1 || c[secondPath(at)] == nil {
		t.Fatalf("a message of a full window writes %v, want %s alone", slices.Collect(maps.Keys(c)), secondPath(at))
	}
	l = commit(t, l, tr)
	if l = Open(tr); !l.Seen(full[1], t0+1) || !l.Seen("m-new", at) || l.Seen("m-other", at) {
		t.Fatal("after the commit, a message of the window or the second is not seen as it should")
	}

	// The second's group full too: its hundredth's.
	l = Open(tr)
	for _, id := range ids("s-", groupLimit) {
		l.Note(id, at)
	}
	l = commit(t, l, tr)
	if n := strings.Count(string(tr.files[secondPath(at)]), "\n") - 1; n != groupLimit {
		t.Fatalf("the second's group holds %d ids, want %d", n, groupLimit)
	}
	l.Note("ms-new", at)
	if c := l.Changes(); len(c) != 1 || c[hundredthPath(at)] == nil {
		t.Fatalf("a message of a full second writes %v, want %s alone", slices.Collect(maps.Keys(c)), hundredthPath(at))
	}
	commit(t, l, tr)
	if l = Open(tr); !l.Seen("ms-new", at) || !l.Seen("s-1", at) || !l.Seen("m-new", at) {
		t.Fatal("after the commit, a message of the hundredth or the second is not seen")
	}

	l = Open(tr)
	l.Prune(t0 - t0%hourMS + hourMS)
	hour, _ := hourOf(t0)
	if c := l.Changes(); len(c) != 1 || c["messages/"+hour] != nil {
		t.Fatalf("prune past the hour changes %v, want messages/%s deleted", c, hour)
	}

	tr.files[secondPath(at)] = []byte("m-new not-a-time\n")
	l = Open(tr)
	if l.Seen("m-new", at); !IsCorrupt(l.Err()) {
		t.Fatalf("a second's group that does not parse: %v, want a corrupt ledger", l.Err())
	}
}

// TestAnHourOfABacklogWritesSmallFiles: the file a message rewrites holds
// at most groupLimit ids however many its hour sent: after 200,000
// messages sent over one hour (a backlog's rate), one file per 15 seconds
// would hold about 830; the windows are full, and noting one more writes
// its second's group.
func TestAnHourOfABacklogWritesSmallFiles(t *testing.T) {
	start := t0 - t0%hourMS
	l := Open(fillHour(t, 200_000, t0))
	at := start + hourMS/2
	l.Note("one-more", at)
	c := l.Changes()
	if len(c) != 1 || c[secondPath(at)] == nil {
		t.Fatalf("noting one message writes %v, want %s", slices.Collect(maps.Keys(c)), secondPath(at))
	}
	for p, b := range c {
		if lines := strings.Count(string(b), "\n") - 1; lines > groupLimit {
			t.Fatalf("noting one message rewrites %s, a file of %d ids (%d bytes)", p, lines, len(b))
		}
	}
}
