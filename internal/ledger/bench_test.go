package ledger

import (
	"fmt"
	"testing"
)

// BenchmarkNoteAtVolume is what one message costs the ledger with 0,
// 100,000 and 1,000,000 ids kept (over a day, as a busy one would hold),
// and with 500,000 sent within the message's own hour (a backlog at the
// most a worker applies): open the tree, check the id, record it and a
// tenant, and render the changes. Flat: the same few small files whatever
// the volume, which it checks on counts, not times: it fails when a
// volume's files read or bytes written a message are over twice the empty
// ledger's.
func BenchmarkNoteAtVolume(b *testing.B) {
	type cost struct{ reads, written float64 }
	costs := map[string]cost{}
	for _, size := range []struct {
		name string
		tr   func() *tree
	}{
		{"ids=0", func() *tree { return fill(b, 0, 24, t0) }},
		{"ids=100000", func() *tree { return fill(b, 100_000, 24, t0) }},
		{"ids=1000000", func() *tree { return fill(b, 1_000_000, 24, t0) }},
		{"ids=500000-in-its-hour", func() *tree { return fillHour(b, 500_000, t0) }},
	} {
		tr := size.tr() // built once per size
		b.Run(size.name, func(b *testing.B) {
			tr.reads = 0
			written := 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				l := Open(tr)
				id := fmt.Sprint("new-", i)
				if l.Seen(id, t0) {
					b.Fatal("seen")
				}
				l.Note(id, t0)
				l.Touch(Tenant(fmt.Sprint("tenant-", i%1000)), t0)
				for _, c := range l.Changes() {
					written += len(c)
				}
			}
			c := cost{float64(tr.reads) / float64(b.N), float64(written) / float64(b.N)}
			costs[size.name] = c
			b.ReportMetric(c.reads, "reads/op")
			b.ReportMetric(c.written, "written-B/op")
		})
	}
	empty, ok := costs["ids=0"]
	if !ok {
		return // a -bench pattern that left out the empty ledger
	}
	for name, c := range costs {
		if c.reads > 2*max(empty.reads, 1) || c.written > 2*empty.written {
			b.Errorf("%s: %.1f files read and %.0f bytes written a message, against %.1f and %.0f with an empty ledger: not flat",
				name, c.reads, c.written, empty.reads, empty.written)
		}
	}
}
