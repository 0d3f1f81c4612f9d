package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestFormerMessageGroupsAreRead: ids recorded by a version before
// 2026-12-06, in the group of their hour and hash or of their minute and
// hash, are seen; noting them again writes nothing; a new message goes to
// its 15 seconds' group and leaves the former files as they are; Prune
// drops the hour with them; a former group that does not parse is an
// error.
func TestFormerMessageGroupsAreRead(t *testing.T) {
	tr := newTree()
	hourly, minutely := messageGroupPath("old-hour", t0+1, formerHourSpan), messageGroupPath("old-minute", t0+2, formerMinuteSpan)
	tr.files[hourly] = fmt.Appendf(nil, "# former\nold-hour %d\n", t0+1)
	tr.files[minutely] = fmt.Appendf(nil, "# former\nold-minute %d\n", t0+2)
	if !strings.HasSuffix(hourly, "/"+hourBucket("old-hour")) || !strings.Contains(minutely, "/m25/") {
		t.Fatalf("former paths %s, %s", hourly, minutely)
	}

	l := Open(tr)
	if !l.Seen("old-hour", t0+1) || !l.Seen("old-minute", t0+2) || l.Seen("old-hour", t0+2) {
		t.Fatal("ids of the former groups are not seen as they should")
	}
	l.Note("old-hour", t0+1)
	l.Note("old-minute", t0+2)
	if c := l.Changes(); len(c) != 0 {
		t.Fatalf("noting ids the former groups hold writes %v", slices.Collect(maps.Keys(c)))
	}
	l.Note("new", t0+3)
	if c := l.Changes(); len(c) != 1 || c[windowPath(t0)] == nil {
		t.Fatalf("a new message writes %v, want %s alone", slices.Collect(maps.Keys(c)), windowPath(t0))
	}

	l = Open(tr)
	l.Prune(t0 - t0%hourMS + hourMS)
	hour, _ := hourOf(t0)
	if c := l.Changes(); len(c) != 1 || c["messages/"+hour] != nil {
		t.Fatalf("prune past the hour changes %v, want messages/%s deleted", c, hour)
	}

	tr.files[minutely] = []byte("old-minute soon\n")
	if l := Open(tr); l.Seen("old-minute", t0+2) || !IsCorrupt(l.Err()) {
		t.Fatalf("a former group that does not parse: %v, want a corrupt ledger", l.Err())
	}
}

// TestABacklogsBatchesWriteTheSameBytes: a backlog drained in the order it
// was sent writes as many message-group bytes in its last batches as in
// its first, whether it was sent over two minutes (167 a second), over ten
// seconds (2,000 a second) or over an hour; the hash groups before
// 2026-12-06 wrote 57 KB in the first batch of the first and 893 KB in the
// last. Drained in any order, no file it writes holds more than groupLimit
// ids.
func TestABacklogsBatchesWriteTheSameBytes(t *testing.T) {
	const messages, batch = 20_000, 500
	for _, c := range []struct {
		name     string
		over     int64 // ms the backlog was sent over
		shuffled bool
	}{
		{"sent over 2 minutes", 120_000, false},
		{"sent over 10 seconds", 10_000, false},
		{"sent over an hour", hourMS - 1, false},
		{"sent over 2 minutes, drained in any order", 120_000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			order := make([]int, messages)
			for i := range order {
				order[i] = i
				if c.shuffled {
					j := (i * 7919) % (i + 1) // a fixed shuffle
					order[i], order[j] = order[j], i
				}
			}
			tr := newTree()
			var written []int
			start := t0 - t0%hourMS
			for k := 0; k < messages/batch; k++ {
				l := Open(tr)
				for _, n := range order[k*batch : (k+1)*batch] {
					l.Note(fmt.Sprintf("%08x-aaaa-4bbb-8ccc-%012x", uint32(n*2654435761), n), start+int64(n)*c.over/messages)
				}
				bytes, c := 0, l.Changes()
				for p, b := range c {
					bytes += len(b)
					if n := strings.Count(string(b), "\n") - 1; n > groupLimit {
						t.Fatalf("batch %d writes %s, %d ids", k+1, p, n)
					}
				}
				written = append(written, bytes)
				tr.apply(t, c)
			}
			first, last := written[0]+written[1], written[len(written)-2]+written[len(written)-1]
			t.Logf("first two batches %d bytes, last two %d", first, last)
			if !c.shuffled && (last > first*5/4 || last > 2*batch*80) {
				t.Errorf("the last two batches write %d bytes of message groups, the first two %d: want no more, and at most 80 bytes a message", last, first)
			}
		})
	}
}

// TestADayStaysInItsWindows: ids sent evenly over a day stay in the files
// of their 15 seconds, 240 an hour (5,760 a day, where the hash groups
// made 6,144), as long as no window gets more than 256: 200,000 here (35
// a window); 1,000,000 a day is 174 a window, the same files (not run: a
// million Notes take 8 s).
func TestADayStaysInItsWindows(t *testing.T) {
	tr := fill(t, 200_000, 24, t0)
	most := 0
	for p, b := range tr.files {
		if !strings.HasPrefix(p, "messages/") || strings.Count(p, "/") != 2 {
			t.Fatalf("%s: a file that is not a window's", p)
		}
		most = max(most, strings.Count(string(b), "\n")-1)
	}
	// fill's hours run back from t0-1 (14:24:59.999), so they straddle the
	// clock's: up to 25 hour folders, each window of the day used once.
	if len(tr.files) < 24*239 || len(tr.files) > 24*240 || most > groupLimit {
		t.Fatalf("a day of 200,000 ids: %d files, the fullest of %d ids; want 5,760 at most, of at most %d", len(tr.files), most, groupLimit)
	}
}
