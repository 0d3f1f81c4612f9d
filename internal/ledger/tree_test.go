package ledger

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
)

// tree is an in-memory ledger tree: a Reader that counts its calls, and
// takes a Ledger's Changes as a commit would.
type tree struct {
	files        map[string][]byte
	reads, lists int
	fail         error // when set, ReadFile and ReadDir return it
}

func newTree() *tree { return &tree{files: map[string][]byte{}} }

func (t *tree) ReadFile(name string) ([]byte, error) {
	t.reads++
	if t.fail != nil {
		return nil, t.fail
	}
	b, ok := t.files[name]
	if !ok {
		return nil, fmt.Errorf("read %s: %w", name, fs.ErrNotExist)
	}
	return b, nil
}

func (t *tree) ReadDir(name string) ([]string, error) {
	t.lists++
	if t.fail != nil {
		return nil, t.fail
	}
	names := map[string]bool{}
	for p := range t.files {
		if rest, ok := strings.CutPrefix(p, name+"/"); ok {
			first, _, _ := strings.Cut(rest, "/")
			names[first] = true
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("read dir %s: %w", name, fs.ErrNotExist)
	}
	return slices.Sorted(maps.Keys(names)), nil
}

// apply writes changes to t as a commit would: nil deletes a file or a
// folder. A change never writes under a folder it deletes.
func (t *tree) apply(tb testing.TB, changes map[string][]byte) {
	tb.Helper()
	for p, b := range changes {
		if b != nil {
			continue
		}
		for q := range changes {
			if strings.HasPrefix(q, p+"/") {
				tb.Fatalf("changes delete %s and write %s in it", p, q)
			}
		}
		delete(t.files, p)
		for q := range t.files {
			if strings.HasPrefix(q, p+"/") {
				delete(t.files, q)
			}
		}
	}
	for p, b := range changes {
		if b != nil {
			t.files[p] = b
		}
	}
}

// commit applies l's changes to t and opens t again.
func commit(tb testing.TB, l *Ledger, t *tree) *Ledger {
	tb.Helper()
	if err := l.Err(); err != nil {
		tb.Fatal(err)
	}
	t.apply(tb, l.Changes())
	return Open(t)
}

// fill is a tree holding n message ids sent over hours hours before end
// (Unix ms, exclusive), as the ledger writes them: id i in the hour i%hours
// before end, the first of each hour (i < hours) at end-1-i hours, the
// others spread evenly over the hour before that moment.
func fill(tb testing.TB, n, hours int, end int64) *tree {
	tb.Helper()
	l := Open(nil)
	for i := range n {
		l.Note(fmt.Sprintf("id-%d", i), fillSent(i, n, hours, end))
	}
	t := newTree()
	t.apply(tb, l.Changes())
	return t
}

// fillSent is when fill's id i was sent.
func fillSent(i, n, hours int, end int64) int64 {
	apart := hourMS / int64(n/hours+1)
	return end - 1 - int64(i%hours)*hourMS - int64(i/hours)*apart
}

// fillHour is a tree holding n message ids sent at evenly spread moments
// of the hour that at falls in, as a backlog's are.
func fillHour(tb testing.TB, n int, at int64) *tree {
	tb.Helper()
	start := at - at%hourMS
	l := Open(nil)
	for i := range n {
		l.Note(fmt.Sprintf("id-%d", i), start+int64(i)*hourMS/int64(n))
	}
	t := newTree()
	t.apply(tb, l.Changes())
	return t
}

// windowPath, secondPath and hundredthPath are the groups of the
// moment sent (Unix ms) of each span.
func windowPath(sent int64) string    { return messageGroupPath("", sent, windowSpan) }
func secondPath(sent int64) string    { return messageGroupPath("", sent, secondSpan) }
func hundredthPath(sent int64) string { return messageGroupPath("", sent, hundredthSpan) }

// ids returns n ids "<prefix><i>".
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}
