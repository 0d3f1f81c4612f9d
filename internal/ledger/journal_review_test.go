package ledger

import (
	"fmt"
	"strings"
	"testing"
)

// answerAlike reports every target of keys that plain and squashed read
// differently.
func answerAlike(t *testing.T, plain, squashed *tree, keys ...string) {
	t.Helper()
	for _, k := range keys {
		pr, pok := Open(plain).Get(k)
		sr, sok := Open(squashed).Get(k)
		if pr != sr || pok != sok {
			t.Errorf("%s: squashed reads %v %v, unsquashed %v %v", k, sr, sok, pr, pok)
		}
	}
}

// TestACopyAPruneDroppedStaysDropped: a batch's prune drops a target's
// older copy at its keyed path (an older replica's) while its newer copy
// at its own group stays, so its record does not change: the push takes
// the copy out all the same. (Found by the second review of the journal:
// the squash kept that file as base had it, copy included; a later prune
// that dropped the target's record found the copy there, wrote that group
// and pruned it, and another target's record went that the unsquashed
// ledger keeps.)
//
//	tree: targets/<k's own group>: k t0+1000; targets/<k's keyed path>: k t0, z t0+2000
//	  (z and w are tenants whose own group is k's keyed path)
//	batch A (100 onboardings + Touch(w, t0+5s), Prune(t0+500)): the keyed
//	  path is written and pruned of k's copy t0; k still reads t0+1000
//	batch B (1 job): Touch(ReleaseIn("premium", x), t0+9s), Prune(t0+3000)
func TestACopyAPruneDroppedStaysDropped(t *testing.T) {
	id := "x-copy"
	k := Tenant(id)
	keyed, _ := earlierTargetPaths(k)
	w := tenantWhere(t, func(c string) bool { return targetPath(c) == keyed })
	z := tenantWhere(t, func(c string) bool { return c != w && targetPath(c) == keyed })
	plain, squashed := newTree(), newTree()
	for _, tr := range []*tree{plain, squashed} {
		tr.files[targetPath(k)] = fmt.Appendf(nil, "%s %d\n", k, t0+1000)
		tr.files[keyed] = fmt.Appendf(nil, "%s %d\n%s %d\n", k, t0, z, t0+2000)
	}
	jobs := bigBatch("b", 100, t0+5000, func(l *Ledger) {
		l.Touch(w, t0+5000)
		l.Prune(t0 + 500)
	})
	plain, squashed = bothWays(t, plain, squashed, jobs...)
	answerAlike(t, plain, squashed, k, z, w)
	if _, ok := Open(plain).groupFile(keyed).targets[k]; ok {
		t.Fatal("setup: the unsquashed ledger still holds k's copy at its keyed path")
	}
	if _, ok := Open(squashed).groupFile(keyed).targets[k]; ok {
		t.Errorf("after A: the squashed ledger holds k's copy at %s that the batch pruned", keyed)
	}

	job := func(l *Ledger) {
		l.Touch(ReleaseIn("premium", id), t0+9000)
		l.Prune(t0 + 3000)
	}
	plain, _ = batch(t, plain, job)
	squashed, _ = batch(t, squashed, job) // one job: pushed as it is
	answerAlike(t, plain, squashed, k, z, w)
}

// groupFile is the targets group at p, as l reads it.
func (l *Ledger) groupFile(p string) *group { return l.targetGroup(p) }

// TestAPruneChainReachesTheJournal: a line written before escaping
// ("env/pool%1", read as Env("pool%1") = "env/pool%251") sits at the
// former path of its raw spelling, which is none of the canonical key's
// places. When that group is pruned, drop takes the canonical key's copies
// out of its places and prunes their groups. Unsquashed, the key's own
// group holds the record a batch set and is pruned with it; squashed, the
// record is a journal line, which must go as well, and the group be
// pruned. (Found by the second review of the journal: drop never looked
// at the journal.)
//
//	tree: targets/<raw's former path>: env/pool%1 t0, y t0+50 (y's former copy);
//	      targets/<Env("pool%1")'s group>: z t0+200
//	batch A (100 onboardings + Set(Env("pool%1"), t0+100, "r1")): journaled
//	batch B (1 job): Touch(y, t0+9s), Prune(t0+300)
func TestAPruneChainReachesTheJournal(t *testing.T) {
	var raw, k string
	for i := range 1000 {
		raw = fmt.Sprintf("env/pool%%%d", i)
		k = canonical(raw)
		if k != raw && digit(k) != "0" {
			break
		}
	}
	if want := Env(unescape(strings.TrimPrefix(raw, "env/"))); k != want {
		t.Fatalf("setup: %s reads as %s, not %s", raw, k, want)
	}
	rawFormer := targetsDir + "/" + bucket(raw)[:2] + "/" + bucket(raw)[2:]
	for _, p := range rawPlaces(k) {
		if p == rawFormer {
			t.Fatal("setup: the raw line is at a place of the key")
		}
	}
	y := tenantWhere(t, func(c string) bool { _, f := earlierTargetPaths(c); return f == rawFormer })
	z := tenantWhere(t, func(c string) bool { return targetPath(c) == targetPath(k) })
	plain, squashed := newTree(), newTree()
	for _, tr := range []*tree{plain, squashed} {
		tr.files[rawFormer] = fmt.Appendf(nil, "%s %d\n%s %d\n", raw, t0, y, t0+50)
		tr.files[targetPath(k)] = fmt.Appendf(nil, "%s %d\n", z, t0+200)
	}
	jobs := bigBatch("b", 100, t0+5000, func(l *Ledger) { l.Set(k, t0+100, "r1") })
	plain, squashed = bothWays(t, plain, squashed, jobs...)
	if _, ok := Open(squashed).journal(k).latest(k); !ok {
		t.Fatalf("setup: %s not journaled", k)
	}
	answerAlike(t, plain, squashed, k, z, y)

	job := func(l *Ledger) {
		l.Touch(y, t0+9000)
		l.Prune(t0 + 300)
	}
	plain, _ = batch(t, plain, job)
	squashed, _ = batch(t, squashed, job)
	answerAlike(t, plain, squashed, k, z, y)
}

func rawPlaces(k string) []string {
	keyed, former := earlierTargetPaths(k)
	return []string{targetPath(k), keyed, former}
}

// countingReader is a tree that remembers the files read.
type countingReader struct {
	*tree
	read []string
}

func (r *countingReader) ReadFile(name string) ([]byte, error) {
	r.read = append(r.read, name)
	return r.tree.ReadFile(name)
}

// TestAPruneReadsOnlyWhatItDrops: Prune "reads no other group but the
// earlier places of the records it drops": a journaled record newer than
// the bound is not dropped, and the prune of its group reads neither of
// its earlier places, so a corrupt file there fails no commit that the
// unsquashed ledger makes. (Found by the second review of the journal:
// the prune read them for every journaled target of its group.)
func TestAPruneReadsOnlyWhatItDrops(t *testing.T) {
	plain, squashed := newTree(), newTree()
	plain, squashed = bothWays(t, plain, squashed, bigBatch("a", 100, t0+5000)...)
	id := journaledTenant(t, squashed, "a", 100)
	k := Tenant(id)
	keyed, former := earlierTargetPaths(k)
	job := func(l *Ledger) {
		l.Touch(ReleaseIn("premium", id), t0+9000)
		l.Prune(t0 + 1000) // k's record, t0+5000, stays
	}
	for name, tr := range map[string]*tree{"unsquashed": plain, "squashed": squashed} {
		rec := &countingReader{tree: tr.clone()}
		l := Open(rec)
		l.Touch(ReleaseIn("premium", id), t0+9000) // reads k's group and its places
		rec.read = nil
		l.Prune(t0 + 1000)
		for _, p := range rec.read {
			if p == keyed || p == former {
				t.Errorf("%s: the prune reads %s, an earlier place of %s, which it does not drop", name, p, k)
			}
		}
	}
	for name, tr := range map[string]*tree{"unsquashed": plain, "squashed": squashed} {
		c := tr.clone()
		c.files[former] = []byte("not a ledger line\n")
		l := Open(c)
		job(l)
		if err := l.Err(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
