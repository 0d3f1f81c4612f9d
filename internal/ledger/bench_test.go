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
// the volume.
func BenchmarkNoteAtVolume(b *testing.B) {
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
			b.ReportMetric(float64(tr.reads)/float64(b.N), "reads/op")
			b.ReportMetric(float64(written)/float64(b.N), "written-B/op")
		})
	}
}
