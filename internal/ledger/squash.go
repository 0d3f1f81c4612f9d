package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
)

// journalMin is the fewest records a push must change for Squash to put
// them in the journal: a push of a few messages writes their groups, as
// the journal would only add files to read.
const journalMin = 64

// digits are the journal's folders, in the order a tie is broken.
const digits = "0123456789abcdef"

// Squash is change, the change of the ledger's tree from what base reads
// to what tip reads (the commits of a batch's messages, one on the other,
// merged), made into the change one push should carry; every target's
// record comes out as tip has it. A change of fewer than journalMin
// target records comes back as it is. Otherwise:
//   - the records it changes of each first hex digit but one go to a new
//     journal file of that digit (see journalDir); a record dropped (by
//     Prune) as its line after "- ";
//   - the records of that one digit, and those of every journal file of
//     its folder, go to their groups, and its folder goes: the digit
//     whose folder would hold the most files, so that none holds more
//     than 16 when every push journals;
//   - the copies change takes out of groups (a record moved from the path
//     of an earlier version, a copy a prune dropped) go from them too, so
//     that the next prune of those files does what it would have done.
//
// Message groups' changes stay as they are. The result is read back
// before it is returned: an error when a record would not come out as tip
// has it, or when a file it needs does not read, and the caller pushes
// change as it is.
func Squash(base, tip Reader, change map[string][]byte) (map[string][]byte, error) {
	// l reads base, and once the change's records are known, becomes what
	// the push writes.
	l, after := Open(base), Open(tip)
	keys, err := changedTargets(l, change)
	if err != nil {
		return nil, err
	}
	entries := map[string]entry{}
	for k := range keys {
		b, bok := l.Get(k)
		a, aok := after.Get(k)
		switch {
		case aok && (!bok || a != b):
			entries[k] = entry{r: a}
		case bok && !aok:
			entries[k] = entry{r: b, dropped: true}
		}
	}
	if err := errors.Join(l.Err(), after.Err()); err != nil {
		return nil, err
	}
	if len(entries) < journalMin {
		return change, nil
	}

	out := map[string][]byte{}
	for p, c := range change {
		if !within(p, targetsDir) && !within(p, journalDir) {
			out[p] = c // message groups
		}
	}
	byDigit := map[string]map[string]entry{}
	for k, e := range entries {
		d := digit(k)
		if byDigit[d] == nil {
			byDigit[d] = map[string]entry{}
		}
		byDigit[d][k] = e
	}
	merge, most := "", -1
	for _, r := range digits {
		d := string(r)
		n := len(l.journalOf(d).files)
		if byDigit[d] != nil {
			n++
		}
		if n > most {
			merge, most = d, n
		}
	}
	for d, es := range byDigit {
		if d != merge {
			out[journalDir+"/"+d+"/"+l.journalOf(d).nextName()] = renderJournal(es)
		}
	}

	// The merged digit: the targets its journal and this change name go
	// to their groups as tip reads them.
	f := l.journalOf(merge)
	merged := map[string]bool{}
	for _, jf := range f.files {
		for k := range jf.entries {
			merged[k] = true
		}
	}
	for k := range byDigit[merge] {
		merged[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		r, ok := after.Get(k)
		put(k, l.places(k), f, entry{r: r, dropped: !ok})
	}
	// Any other target's copies that the batch took out of a group (a
	// Set moved the record, a prune dropped it) leave it in the push too:
	// a copy left would make the next prune of that file drop what it
	// would not have, or answer again once the record it hid goes. So
	// does a journaled target's copy in its own group sent later than
	// its line, which would outrank it (a batch dropped the record, then
	// set it older).
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if merged[k] {
			continue
		}
		e, journaled := entries[k]
		gs, tip := l.places(k), after.places(k)
		for i, g := range gs {
			c, ok := g.targets[k]
			if !ok {
				continue
			}
			if _, kept := tip[i].targets[k]; !kept || journaled && i == 0 && c.MS > e.r.MS {
				delete(g.targets, k)
				g.dirty = true
			}
		}
	}
	if err := errors.Join(l.Err(), after.Err()); err != nil {
		return nil, err
	}
	for p, c := range l.Changes() {
		if within(p, targetsDir) {
			out[p] = c
		}
	}
	if len(f.files) > 0 {
		out[journalDir+"/"+merge] = nil
	}
	if err := readsAsTip(base, out, after, keys, merged); err != nil {
		return nil, err
	}
	return out, nil
}

// changedTargets are the targets named in the files change writes or
// deletes under targets/ and journal/, as change writes them and as l,
// the ledger before it, reads them.
func changedTargets(l *Ledger, change map[string][]byte) (map[string]bool, error) {
	keys := map[string]bool{}
	for p, c := range change {
		journal := within(p, journalDir)
		if !journal && !within(p, targetsDir) {
			continue
		}
		if c != nil {
			if err := namedIn(c, journal, keys); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
			}
		}
		if !journal {
			for k := range l.targetGroup(p).targets {
				keys[k] = true
			}
			continue
		}
		d, _, _ := strings.Cut(strings.TrimPrefix(p, journalDir+"/"), "/")
		for _, jf := range l.journalOf(d).files {
			if jf.path == p {
				for k := range jf.entries {
					keys[k] = true
				}
			}
		}
	}
	return keys, l.Err()
}

// namedIn adds the targets file b names to keys.
func namedIn(b []byte, journal bool, keys map[string]bool) error {
	if journal {
		m, err := parseJournal(b)
		for k := range m {
			keys[k] = true
		}
		return err
	}
	return each(b, func(key string, _ int64, _ string) { keys[canonical(key)] = true })
}

// readsAsTip checks that base with out applied gives every target of
// keys and merged, and every target of the group files out writes, the
// record tip gives it.
func readsAsTip(base Reader, out map[string][]byte, tip *Ledger, keys, merged map[string]bool) error {
	check := maps.Clone(keys)
	maps.Copy(check, merged)
	for p, c := range out {
		if c != nil && within(p, targetsDir) {
			if err := namedIn(c, false, check); err != nil {
				return fmt.Errorf("%w: %s as squashed: %v", ErrCorrupt, p, err)
			}
		}
	}
	got := Open(newOverlay(base, out))
	for _, k := range slices.Sorted(maps.Keys(check)) {
		want, wok := tip.Get(k)
		have, hok := got.Get(k)
		if wok != hok || want != have {
			return fmt.Errorf("the squashed ledger reads %s as %v (%v), not %v (%v)", k, have, hok, want, wok)
		}
	}
	return errors.Join(tip.Err(), got.Err())
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// overlay reads base with a change applied: nil deletes a file or a
// folder, and no file is written below a folder deleted.
type overlay struct {
	base      Reader
	change    map[string][]byte
	deletions []string
}

func newOverlay(base Reader, change map[string][]byte) overlay {
	o := overlay{base: base, change: change}
	for p, c := range change {
		if c == nil {
			o.deletions = append(o.deletions, p)
		}
	}
	return o
}

func (o overlay) deleted(p string) bool {
	return slices.ContainsFunc(o.deletions, func(q string) bool { return within(p, q) })
}

func (o overlay) ReadFile(name string) ([]byte, error) {
	if c, ok := o.change[name]; ok && c != nil {
		return c, nil
	}
	if o.deleted(name) {
		return nil, fmt.Errorf("read %s: %w", name, fs.ErrNotExist)
	}
	return o.base.ReadFile(name)
}

func (o overlay) ReadDir(name string) ([]string, error) {
	names := map[string]bool{}
	if !o.deleted(name) {
		old, err := o.base.ReadDir(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, n := range old {
			if !o.deleted(name + "/" + n) {
				names[n] = true
			}
		}
	}
	for p, c := range o.change {
		if rest, ok := strings.CutPrefix(p, name+"/"); ok && c != nil {
			first, _, _ := strings.Cut(rest, "/")
			names[first] = true
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("read dir %s: %w", name, fs.ErrNotExist)
	}
	return slices.Sorted(maps.Keys(names)), nil
}
