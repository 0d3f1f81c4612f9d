package ledger

import (
	"fmt"
	"strings"
	"testing"
)

// bigBatch is a batch of n onboardings of fresh tenants "<prefix><i>" sent
// at ms, plus extra jobs first.
func bigBatch(prefix string, n int, ms int64, extra ...func(*Ledger)) []func(*Ledger) {
	jobs := append([]func(*Ledger){}, extra...)
	for i := range n {
		jobs = append(jobs, onboard(fmt.Sprint(prefix, i), ms))
	}
	return jobs
}

// journaledTenant is the first id "<prefix><i>", i < n, of a tenant whose
// record tr holds in a journal file, not in its group.
func journaledTenant(t *testing.T, tr *tree, prefix string, n int) string {
	t.Helper()
	l := Open(tr)
	for i := range n {
		id := fmt.Sprint(prefix, i)
		if _, ok := l.journal(Tenant(id)).latest(Tenant(id)); ok {
			return id
		}
	}
	t.Fatal("no journaled tenant")
	return ""
}

// bothWays applies jobs to plain as they are, and to squashed followed by
// Squash, as the pipeline does; it returns both trees' new state.
func bothWays(t *testing.T, plain, squashed *tree, jobs ...func(*Ledger)) (*tree, *tree) {
	t.Helper()
	p, _ := batch(t, plain, jobs...)
	tip, change := batch(t, squashed, jobs...)
	squash(t, squashed, tip, change)
	return p, squashed
}

// TestAPruneDropsJournaledRecordsAsFromTheirGroup: a record that a big
// batch put in the journal goes when a later commit prunes its group, as
// it would had the batch written it there. (Found by the review of the
// journal: Prune looked at groups only, and the record outlived it.)
//
//	batch A (100 onboardings, t0): x's records go to journal/<d>/00000001
//	batch B (1 job): Touch(ReleaseIn("premium", x), t0+10s) (x's group is
//	  written), Prune(t0+5s)
//
// Unsquashed, tenant/x (t0 < before) is dropped from its group; squashed,
// it must be dropped from the journal.
func TestAPruneDropsJournaledRecordsAsFromTheirGroup(t *testing.T) {
	plain, squashed := newTree(), newTree()
	plain, squashed = bothWays(t, plain, squashed, bigBatch("a", 100, t0)...)

	x := journaledTenant(t, squashed, "a", 100)
	job := func(l *Ledger) {
		l.Touch(ReleaseIn("premium", x), t0+10_000)
		l.Prune(t0 + 5_000)
	}
	plain, _ = batch(t, plain, job)
	tip, change := batch(t, squashed, job)
	squash(t, squashed, tip, change)

	for _, k := range []string{Tenant(x), ReleaseIn("basic", x)} {
		pr, pok := Open(plain).Get(k)
		sr, sok := Open(squashed).Get(k)
		if pr != sr || pok != sok {
			t.Errorf("%s: squashed reads %v %v, unsquashed %v %v", k, sr, sok, pr, pok)
		}
	}
}

// TestAJournaledRecordLeavesItsEarlierPaths: a record a batch journals
// leaves the paths of earlier versions as Set has it do. (Found by the
// review of the journal: the squash left its old copy at its former path;
// a later Set took the copy out, which made that group written, and Prune
// then dropped another target's record there that the unsquashed ledger
// keeps.)
//
//	tree: targets/<h0h1>/<h2h3> (former path) holds tenant/x t0 and tenant/y t0
//	batch A (x and 99 others onboarded at t0+100): x journaled
//	batch B (1 job): Touch(tenant/x, t0+10s), Prune(t0+5s)
//
// Unsquashed, batch A moved x out of the former group, B does not touch
// it, and y stays; squashed, the same.
func TestAJournaledRecordLeavesItsEarlierPaths(t *testing.T) {
	x := tenantWhere(t, func(k string) bool { return digit(k) != "0" })
	_, formerX := earlierTargetPaths(x)
	y := tenantWhere(t, func(k string) bool {
		_, f := earlierTargetPaths(k)
		return k != x && f == formerX
	})
	plain, squashed := newTree(), newTree()
	for _, tr := range []*tree{plain, squashed} {
		tr.files[formerX] = fmt.Appendf(nil, "# former\n%s %d\n%s %d\n", x, t0, y, t0)
	}
	xid := strings.TrimPrefix(x, "tenant/")
	jobs := append(bigBatch("b", 99, t0+100), onboard(xid, t0+100))
	plain, squashed = bothWays(t, plain, squashed, jobs...)
	if _, ok := Open(squashed).journal(x).latest(x); !ok {
		t.Fatalf("%s not journaled", x)
	}
	for _, k := range []string{x, y} {
		pr, pok := Open(plain).Get(k)
		sr, sok := Open(squashed).Get(k)
		if pr != sr || pok != sok {
			t.Fatalf("after A %s: squashed %v %v, unsquashed %v %v", k, sr, sok, pr, pok)
		}
	}
	job := func(l *Ledger) {
		l.Touch(x, t0+10_000)
		l.Prune(t0 + 5_000)
	}
	plain, _ = batch(t, plain, job)
	tip, change := batch(t, squashed, job)
	squash(t, squashed, tip, change)
	for _, k := range []string{x, y} {
		pr, pok := Open(plain).Get(k)
		sr, sok := Open(squashed).Get(k)
		if pr != sr || pok != sok {
			t.Errorf("%s: squashed reads %v %v, unsquashed %v %v", k, sr, sok, pr, pok)
		}
	}
}

// TestARecordSetOlderThanOneDroppedIsJournaled: a batch prunes a record,
// then sets the target again at an earlier send time (absent, it takes
// any): its journal line must not be outranked by the copy the group
// still holds, sent later; the squash takes that copy out.
func TestARecordSetOlderThanOneDroppedIsJournaled(t *testing.T) {
	k := tenantWhere(t, func(k string) bool { return digit(k) != "0" }) // "0" is merged
	id := strings.TrimPrefix(k, "tenant/")
	plain, squashed := newTree(), newTree()
	plain, squashed = bothWays(t, plain, squashed, func(l *Ledger) { l.Touch(k, t0+50) })
	jobs := bigBatch("b", 100, t0+100,
		func(l *Ledger) {
			l.Set(ReleaseIn("basic", id), t0+100, "v") // writes k's group
			l.Prune(t0 + 60)                           // which drops k's record
		},
		func(l *Ledger) { l.Touch(k, t0+40) })
	plain, squashed = bothWays(t, plain, squashed, jobs...)
	if _, ok := Open(squashed).journal(k).latest(k); !ok {
		t.Fatalf("%s not journaled", k)
	}
	if r, _ := Open(squashed).Get(k); r.MS != t0+40 {
		t.Fatalf("%s reads %v, want the record set after the prune", k, r)
	}
	sameRecords(t, squashed, plain)
}
