package ledger

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// journal is target's journal folder, as l reads it.
func (l *Ledger) journal(target string) *journalFolder {
	_, j := l.lookup(target)
	return j
}

// clone is a copy of t's files.
func (t *tree) clone() *tree {
	return &tree{files: maps.Clone(t.files)}
}

// batch applies jobs to base as a batch does, each job on the ledger as
// the one before left it, and returns the tree after them and their
// change, merged.
func batch(tb testing.TB, base *tree, jobs ...func(l *Ledger)) (*tree, map[string][]byte) {
	tb.Helper()
	tip := base.clone()
	change := map[string][]byte{}
	for _, job := range jobs {
		l := Open(tip)
		job(l)
		if err := l.Err(); err != nil {
			tb.Fatal(err)
		}
		c := l.Changes()
		tip.apply(tb, c)
		maps.Copy(change, c)
	}
	return tip, change
}

// squash pushes a batch's change to base as the pipeline does, and
// returns what it wrote.
func squash(tb testing.TB, base, tip *tree, change map[string][]byte) map[string][]byte {
	tb.Helper()
	out, err := Squash(base, tip, change)
	if err != nil {
		tb.Fatal(err)
	}
	base.apply(tb, out)
	return out
}

// journalFiles is how many files each digit's journal folder of t holds.
func journalFiles(t *tree) map[string]int {
	n := map[string]int{}
	for p := range t.files {
		if rest, ok := strings.CutPrefix(p, journalDir+"/"); ok {
			d, _, _ := strings.Cut(rest, "/")
			n[d]++
		}
	}
	return n
}

// onboard is the job of an onboarding of tenant id sent at ms: the
// records it leaves.
func onboard(id string, ms int64) func(*Ledger) {
	return func(l *Ledger) {
		if l.Stale(Tenant(id), ms) {
			return
		}
		l.Touch(Tenant(id), ms)
		l.Set(ReleaseIn("basic", id), ms, "1.0")
	}
}

// TestABatchGoesToTheJournal: a batch of 500 onboardings is pushed as a
// journal file for 15 digits and the groups of the sixteenth, whose
// folders alone it rewrites; every record reads as the batch left it.
func TestABatchGoesToTheJournal(t *testing.T) {
	base := newTree()
	var jobs []func(*Ledger)
	for i := range 500 {
		jobs = append(jobs, onboard(fmt.Sprint("t", i), t0+int64(i)))
	}
	tip, change := batch(t, base, jobs...)
	out := squash(t, base, tip, change)

	journals := journalFiles(base)
	if len(journals) != 15 {
		t.Fatalf("journal folders %v, want 15 of one file", journals)
	}
	var merged string
	for _, d := range digits {
		if journals[string(d)] == 0 {
			merged = string(d)
		}
	}
	for p := range out {
		if within(p, targetsDir) && !within(p, targetsDir+"/"+merged) {
			t.Errorf("writes %s, outside the merged digit's folder %s", p, merged)
		}
	}
	sameRecords(t, base, tip)
	if merged != "0" {
		t.Errorf("merged %s, want 0 (every folder as full, the first digit)", merged)
	}
}

// sameRecords checks that got reads every target named in either's
// target and journal files as want does.
func sameRecords(tb testing.TB, got, want *tree) {
	tb.Helper()
	keys := map[string]bool{}
	for _, tr := range []*tree{got, want} {
		for p, b := range tr.files {
			if within(p, targetsDir) || within(p, journalDir) {
				if err := namedIn(b, within(p, journalDir), keys); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	g, w := Open(got), Open(want)
	for k := range keys {
		gr, gok := g.Get(k)
		wr, wok := w.Get(k)
		if gr != wr || gok != wok {
			tb.Errorf("%s reads %v %v, want %v %v", k, gr, gok, wr, wok)
		}
	}
	if err := g.Err(); err != nil {
		tb.Fatal(err)
	}
}

// TestTheJournalStaysBoundedAndTrue: forty batches of onboardings, of
// tenants new and known, at send times that repeat, with prunes between
// them, each squashed onto the one before: after each, every record
// reads as the batches left it unsquashed, and no digit's journal folder
// holds more than 16 files.
func TestTheJournalStaysBoundedAndTrue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base, plain := newTree(), newTree() // squashed, and as the jobs wrote it
	for n := range 40 {
		var jobs []func(*Ledger)
		size := 64 + rng.IntN(400)
		if n%7 == 3 {
			size = 1 + rng.IntN(20) // a few messages: groups, not the journal
		}
		for range size {
			id := fmt.Sprint("t", rng.IntN(3000))
			ms := t0 + int64(n*1000+rng.IntN(2000))
			switch rng.IntN(4) {
			case 0:
				jobs = append(jobs, func(l *Ledger) { l.Set(Tier("basic"), ms, fmt.Sprint("v", ms%3)) })
			case 1:
				jobs = append(jobs, func(l *Ledger) { l.Set(ReleaseIn("basic", id), ms, fmt.Sprint("v", ms%3)) })
			default:
				jobs = append(jobs, onboard(id, ms))
			}
		}
		if n%5 == 4 {
			before := t0 + int64(n*1000)
			jobs = append(jobs, func(l *Ledger) {
				l.Touch(Tenant("pruner"), before+5000)
				l.Prune(before)
			})
		}
		// The same jobs on the unsquashed ledger, for the answer.
		wantTip, _ := batch(t, plain, jobs...)
		plain = wantTip
		tip, change := batch(t, base, jobs...)
		squash(t, base, tip, change)
		sameRecords(t, base, plain)
		for d, k := range journalFiles(base) {
			if k > 16 {
				t.Fatalf("batch %d: journal/%s holds %d files", n, d, k)
			}
		}
	}
	if len(journalFiles(base)) == 0 {
		t.Fatal("no journal after 40 batches")
	}
}

// TestAFewRecordsGoToTheirGroups: a change of fewer than journalMin
// records is pushed as it is.
func TestAFewRecordsGoToTheirGroups(t *testing.T) {
	base := newTree()
	var jobs []func(*Ledger)
	for i := range (journalMin - 1) / 2 { // two records each
		jobs = append(jobs, onboard(fmt.Sprint("t", i), t0))
	}
	tip, change := batch(t, base, jobs...)
	out, err := Squash(base, tip, change)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(out, change, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatal("a small change was rewritten")
	}
}

// TestAJournalEntryIsTheRecord: a target's latest journal line is its
// record whatever its groups hold, "-" its absence; a record set after it
// goes to its group and leaves the journal; an older one is stale.
func TestAJournalEntryIsTheRecord(t *testing.T) {
	a, b := Tenant("a"), Tenant("b")
	tr := newTree()
	l := Open(tr)
	l.Touch(a, t0)
	l.Touch(b, t0)
	l = commit(t, l, tr)
	tr.files[journalDir+"/"+digit(a)+"/00000001"] = fmt.Appendf(nil, "# j\n%s %d\n", a, t0+10)
	tr.files[journalDir+"/"+digit(a)+"/00000002"] = fmt.Appendf(nil, "%s %d\n", a, t0+20)
	tr.files[journalDir+"/"+digit(b)+"/00000003"] = fmt.Appendf(nil, "- %s %d\n", b, t0)
	l = Open(tr)
	if r, ok := l.Get(a); !ok || r.MS != t0+20 {
		t.Fatalf("a reads %v %v, want the latest journal line", r, ok)
	}
	if _, ok := l.Get(b); ok {
		t.Fatal("b, dropped in the journal, reads from its group")
	}
	if !l.Stale(a, t0+15) || l.Stale(b, t0-100) {
		t.Fatal("stale answers do not follow the journal")
	}
	l.Touch(a, t0+30)
	c := l.Changes()
	if _, ok := c[targetPath(a)]; !ok {
		t.Fatal("the record did not go to its group")
	}
	l = commit(t, l, tr)
	if r, _ := l.Get(a); r.MS != t0+30 {
		t.Fatalf("a reads %v after Set", r)
	}
	for p, content := range tr.files {
		if within(p, journalDir) && strings.Contains(string(content), a+" ") {
			t.Errorf("%s still names a: %q", p, content)
		}
	}
}

// TestACorruptJournalStopsWrites: a journal file that does not parse, or
// a file in a journal folder that is not one, is an error, and nothing is
// written for the targets of its digit.
func TestACorruptJournalStopsWrites(t *testing.T) {
	a := Tenant("a")
	for name, content := range map[string]string{
		"00000001": "a b c d\n",
		"00000002": "a\n",
		"notes":    "a 1\n",
	} {
		tr := newTree()
		tr.files[journalDir+"/"+digit(a)+"/"+name] = []byte(content)
		l := Open(tr)
		l.Touch(a, t0)
		if !IsCorrupt(l.Err()) {
			t.Errorf("%s %q: err %v, want corrupt", name, content, l.Err())
		}
		if c := l.Changes(); len(c) != 0 {
			t.Errorf("%s: writes %v", name, slices.Collect(maps.Keys(c)))
		}
	}
}

// TestASquashThatWouldReadOtherwiseIsRefused: the check of Squash's
// result finds a record that would not read as the batch left it.
func TestASquashThatWouldReadOtherwiseIsRefused(t *testing.T) {
	base := newTree()
	var jobs []func(*Ledger)
	for i := range 100 {
		jobs = append(jobs, onboard(fmt.Sprint("t", i), t0))
	}
	tip, change := batch(t, base, jobs...)
	out, err := Squash(base, tip, change)
	if err != nil {
		t.Fatal(err)
	}
	for p := range out {
		if within(p, journalDir) {
			out[p] = []byte(strings.Replace(string(out[p]), fmt.Sprint(t0), fmt.Sprint(t0-1), 1))
			break
		}
	}
	keys, _ := changedTargets(Open(base), change)
	if err := readsAsTip(base, out, Open(tip), keys, nil); err == nil {
		t.Fatal("a record changed by the squash was not found")
	}
}

// TestANewerRecordAnOlderVersionWroteCounts: a version before the journal
// writes only groups; a record it wrote after the journal's line (a
// rollback, then forward again) counts over that line, dropped or not,
// and survives the merge of its digit.
func TestANewerRecordAnOlderVersionWroteCounts(t *testing.T) {
	a, b := Tenant("a"), tenantWhere(t, func(k string) bool { return digit(k) == digit(Tenant("a")) && k != Tenant("a") })
	tr := newTree()
	l := Open(tr)
	l.Touch(a, t0+50) // as the older version wrote them, after the journal
	l.Touch(b, t0+50)
	commit(t, l, tr)
	dir := journalDir + "/" + digit(a) + "/"
	for i := range 3 { // the fullest folder: the next push merges it
		tr.files[fmt.Sprintf("%s%08d", dir, i+1)] = fmt.Appendf(nil, "%s %d\n- %s %d\n", a, t0+10, b, t0+20)
	}
	l = Open(tr)
	if r, _ := l.Get(a); r.MS != t0+50 {
		t.Fatalf("a reads %v, want the newer record of its group", r)
	}
	if r, ok := l.Get(b); !ok || r.MS != t0+50 {
		t.Fatalf("b reads %v %v, want the newer record of its group, not the older one dropped", r, ok)
	}
	var jobs []func(*Ledger)
	for i := range 100 {
		jobs = append(jobs, onboard(fmt.Sprint("other", i), t0+100))
	}
	tip, change := batch(t, tr, jobs...)
	out := squash(t, tr, tip, change)
	if _, ok := out[strings.TrimSuffix(dir, "/")]; !ok {
		t.Fatalf("the folder of a's digit was not merged: %v", slices.Sorted(maps.Keys(out)))
	}
	l = Open(tr)
	for _, k := range []string{a, b} {
		if r, ok := l.Get(k); !ok || r.MS != t0+50 {
			t.Errorf("%s reads %v %v after the merge", k, r, ok)
		}
	}
}
