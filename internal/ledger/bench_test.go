package ledger

import (
	"fmt"
	"testing"
)

// BenchmarkNoteAtVolume is what one message costs the ledger with 0,
// 100,000 and 1,000,000 ids kept (over a day, as a busy one would hold):
// open the tree, check the id, record it and a tenant, and render the
// changes. Flat: the same few small files whatever the volume.
func BenchmarkNoteAtVolume(b *testing.B) {
	for _, n := range []int{0, 100_000, 1_000_000} {
		tr := fill(b, n, 24, t0) // built once per size
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
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
