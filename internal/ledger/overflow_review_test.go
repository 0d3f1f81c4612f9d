package ledger

// Tests from an adversarial review of the hour-group overflow (d505dab):
// each failed before the fix it names.

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// overflowed is a tree whose group of t0's 15 seconds holds groupLimit
// ids (sent at t0+1), and where "m-new", sent at atNew in the same 15
// seconds, was applied after it filled: it is in its second's group. It
// returns the tree and the ids of the window in the order they were
// applied.
func overflowed(t *testing.T) (*tree, []string) {
	t.Helper()
	full := ids("m-", groupLimit)
	tr := newTree()
	l := Open(tr)
	for _, id := range full {
		l.Note(id, t0+1)
	}
	l = commit(t, l, tr)
	l.Note("m-new", atNew)
	if c := l.Changes(); c[secondPath(atNew)] == nil {
		t.Fatalf("setup: m-new was not written to its second's group: %v", slices.Collect(maps.Keys(c)))
	}
	commit(t, l, tr)
	if !Open(tr).Seen("m-new", atNew) {
		t.Fatal("setup: m-new not seen")
	}
	return tr, full
}

// atNew is when "m-new" was sent: 14:25:07, in t0's 15 seconds.
var atNew = t0 + 7_000

// withoutLine is b without the line that records id.
func withoutLine(t *testing.T, b []byte, id string) []byte {
	t.Helper()
	var out []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(line, id+" ") {
			out = append(out, line)
		}
	}
	if len(strings.Join(out, "")) == len(b) {
		t.Fatalf("setup: no line for %s", id)
	}
	return []byte(strings.Join(out, ""))
}

// TestAnHourGroupThatLosesALineForgetsOnlyThatLine (before the fix, Seen read
// the minute group only while the hour group was full; kept for the
// window and second groups that replaced them on 2026-12-06):
// Seen reads the minute groups of a bucket only while its hour group holds
// hourGroupLimit ids, so the correctness of every id that overflowed
// depends on the hour group never shrinking afterwards. It can shrink
// without any bug in the worker:
//
//   - someone removes one id's line by hand to have that one message
//     applied again (docs/guarantees.md: deleting the ledger "only shortens
//     the memory of what was applied"),
//   - someone `git revert`s one ledger commit, say the one that noted the
//     256th id of the group (the guarantees talk of reverts of the ledger
//     branch being read whole),
//   - someone deletes the hour group file (messages/<hour>/<hh>) alone.
//
// Sequence: 256 ids fill the hour group; "m-new" is applied and recorded
// in messages/<hour>/m25/<hh>; the hour group loses one line (or the
// whole file). "m-new" is redelivered with its SentTimestamp: Seen reads
// the hour group (255 ids, or none), concludes no id of this bucket went
// to the minutes, and answers false without reading the minute group.
// Consequence: the redelivery is applied a second time, and so is every
// other message of that bucket and hour that overflowed (at a backlog's
// rate thousands of ids), not just the one line removed; Note then writes
// "m-new" into the hour group too, so the id ends in both groups.
func TestAnHourGroupThatLosesALineForgetsOnlyThatLine(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(t *testing.T, tr *tree, ids []string)
	}{
		{"one line removed by hand", func(t *testing.T, tr *tree, ids []string) {
			p := windowPath(t0)
			tr.files[p] = withoutLine(t, tr.files[p], ids[0])
		}},
		{"the commit of the 256th id reverted", func(t *testing.T, tr *tree, ids []string) {
			p := windowPath(t0)
			tr.files[p] = withoutLine(t, tr.files[p], ids[len(ids)-1])
		}},
		{"the hour group file deleted", func(t *testing.T, tr *tree, ids []string) {
			delete(tr.files, windowPath(t0))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, ids := overflowed(t)
			c.edit(t, tr, ids)
			l := Open(tr)
			if !l.Seen("m-new", atNew) {
				t.Errorf("m-new, applied and recorded in %s (still there), is not seen after an edit of %s that did not touch it: its redelivery is applied again",
					secondPath(atNew), windowPath(atNew))
			}
			l.Note("m-new", atNew)
			if ch := l.Changes(); len(ch) != 0 {
				t.Errorf("noting m-new again writes %v: it is now in the hour group and its minute group", slices.Sorted(maps.Keys(ch)))
			}
		})
	}
}

// TestAnyMessageIDIsOneFieldOfItsGroup (before messageKey, ids were written
// as they came): group lines are
// "id ms", "#" starts a comment and ASCII blanks separate fields. each()
// says message ids "are checked before they get here"; nothing checks
// them (queue.convert takes MessageId as it comes, and so does the
// pipeline). An SQS-compatible server (or a test double) can hand out such
// ids.
//
//   - An id starting with "#": Note counts it in the hour group and writes
//     its line, which every later read skips as a comment. Sequence: 255
//     ids and "#..." fill the hour group (256 in memory); the next id of
//     the bucket, "m-new", goes to its minute group; the commit is read
//     again. Consequence: the "#" message is never seen (applied again on
//     every redelivery), and the hour group reads back with 255 ids, so
//     "m-new" and every later overflowed id is not seen either.
//   - An id holding a blank: Note writes "a b <ms>", which does not parse.
//     Consequence: the whole hour group is corrupt, and every later
//     message of that bucket and hour pauses the worker
//     (repository_broken) until someone edits the ledger by hand.
func TestAnyMessageIDIsOneFieldOfItsGroup(t *testing.T) {
	t.Run("id starting with #", func(t *testing.T) {
		hash := "#h"
		tr := newTree()
		l := Open(tr)
		for _, id := range append(ids("m-", groupLimit-1), hash) {
			l.Note(id, t0+1)
		}
		l.Note("m-new", atNew) // the window holds 256 in memory: to its second
		l = commit(t, l, tr)
		if !l.Seen(hash, t0+1) {
			t.Errorf("%q, applied and written, is not seen", hash)
		}
		if !l.Seen("m-new", atNew) {
			t.Errorf("m-new, applied and written to %s, is not seen: the window it overflowed reads back with fewer ids", secondPath(atNew))
		}
	})
	t.Run("id holding a blank", func(t *testing.T) {
		tr := newTree()
		l := Open(tr)
		l.Note("a b", t0)
		l = commit(t, l, tr)
		other := "o-1" // another message of the same 15 seconds
		if l.Seen(other, t0); l.Err() != nil || !l.Seen("a b", t0) {
			t.Errorf("after one message with id %q, its hour group reads as %v (seen: %v)", "a b", l.Err(), l.Seen("a b", t0))
		}
	})
}
