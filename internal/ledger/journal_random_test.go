package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSquashedAndUnsquashedAnswerAlike: the same batches applied to two
// ledgers, one squashed after every batch and one never: after every
// batch, every target reads the same in both, and no squash falls back.
// Records start where one version or another kept them (the whole key's
// path, the former two-level path, their own group), and for odd seeds
// with a second copy in their own group, as a rollout leaves; send times
// tie, values differ at equal times, prunes of several bounds run in a
// job, records are set older than one a batch dropped, held records are
// used up, and journal folders fill and merge. (The reviews of the
// journal found five orders where the two differed, each about records
// older than the prune bound: the tests in journal_prune_test.go and
// journal_review_test.go.)
func TestSquashedAndUnsquashedAnswerAlike(t *testing.T) {
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 77))
		base := newTree()
		for i := range 200 {
			k := Tenant(fmt.Sprint("t", i))
			keyed, former := earlierTargetPaths(k)
			p := []string{keyed, former, targetPath(k)}[i%3]
			base.files[p] = append(base.files[p], fmt.Sprintf("%s %d\n", k, t0+int64(rng.IntN(100)))...)
			if seed%2 == 1 && i%3 != 2 { // a rollout: a second copy at its own group
				h := targetPath(k)
				base.files[h] = append(base.files[h], fmt.Sprintf("%s %d\n", k, t0+int64(rng.IntN(100)))...)
			}
		}
		plain := base.clone()
		before := t0
		for n := range 40 {
			var jobs []func(*Ledger)
			size := 60 + rng.IntN(150)
			if n%3 == 2 {
				size = 1 + rng.IntN(10)
			}
			now := t0 + int64(n)*100
			for range size {
				id := fmt.Sprint("t", rng.IntN(300))
				ms := now + int64(rng.IntN(200)) - 100
				v := fmt.Sprint("v", rng.IntN(2))
				b := before + int64(rng.IntN(60)) - 30
				switch rng.IntN(8) {
				case 0:
					jobs = append(jobs, func(l *Ledger) { l.Set(Tier(fmt.Sprint("tier", len(id)%3)), ms, v) })
				case 1:
					jobs = append(jobs, func(l *Ledger) { l.Set(ReleaseIn("basic", id), ms, v) })
				case 2:
					jobs = append(jobs, func(l *Ledger) { l.Set(HeldIn("premium", id), ms, v) })
				case 3:
					jobs = append(jobs, func(l *Ledger) {
						l.Touch(Tenant(id), ms)
						l.Prune(b)
					})
				case 4:
					jobs = append(jobs, func(l *Ledger) {
						l.Set(ReleaseIn("premium", id), ms, v)
						l.Prune(b + 40)
						l.Touch(Tenant(id), ms+1)
						l.Prune(b)
					})
				case 5:
					jobs = append(jobs, func(l *Ledger) {
						if r, ok := l.Get(HeldIn("premium", id)); ok {
							l.Set(HeldIn("premium", id), r.MS, "")
						}
						l.Prune(b)
					})
				default:
					jobs = append(jobs, onboard(id, ms))
				}
			}
			before += int64(rng.IntN(100))
			plain, _ = batch(t, plain, jobs...)
			tip, change := batch(t, base, jobs...)
			out, err := Squash(base, tip, change)
			if err != nil {
				t.Fatalf("seed %d batch %d: squash falls back: %v", seed, n, err)
			}
			base.apply(t, out)
			sameRecords(t, base, plain)
			if t.Failed() {
				t.Fatalf("seed %d, batch %d (bound about %d)", seed, n, before-t0)
			}
		}
	}
}
