package ledger

import (
	"strconv"
	"strings"
	"testing"
)

// The flat files' headers as today's main writes them.
const (
	legacyTargetsHeader = "# tenant-worker: send time (Unix ms, SQS SentTimestamp) of the last message applied to each\n" +
		"# tenant and pooled environment. A message sent earlier changes nothing of it. Written by tenant-worker.\n"
	legacyMessagesHeader = "# tenant-worker: messages applied in the queues' retention period (id, send time in Unix ms),\n" +
		"# oldest first; a redelivered one is recognised here. Written by tenant-worker.\n"
)

// imported is the ledger Import makes of the two flat files, committed to
// a tree and opened again.
func imported(t *testing.T, targets, messages string) *Ledger {
	t.Helper()
	l := Open(nil)
	if err := l.Import([]byte(targets), []byte(messages)); err != nil {
		t.Fatalf("import: %v", err)
	}
	return commit(t, l, newTree())
}

// TestImportOfTodaysFiles: every record and id of the flat files as
// today's main writes them gives the answers they gave.
func TestImportOfTodaysFiles(t *testing.T) {
	l := imported(t, legacyTargetsHeader+
		"env/pool%1 200\n"+ // written before escaping: pool%1
		"env/pool%20two 300\n"+
		"env/pool\u00a0three 310\n"+
		"held/premium/t3 90 1.0,90\n"+
		"release/t1 120 -\n"+
		"tenant/t1 120\n"+
		"tier/basic 100 1.0\n"+
		"tier/basic 90 0.9\n", // the newer of two counts, in any order
		legacyMessagesHeader+
			"m-1 "+itoa(t0)+"\n"+
			"m-2 "+itoa(t0-3*hourMS)+"\n"+
			"id\u00a0x "+itoa(t0)+"\n")
	for key, want := range map[string]Record{
		Env("pool%1"):           {MS: 200},
		Env("pool two"):         {MS: 300},
		Env("pool\u00a0three"):  {MS: 310},
		HeldIn("premium", "t3"): {MS: 90, Value: "1.0,90"},
		Release("t1"):           {MS: 120, Value: "-"},
		Tenant("t1"):            {MS: 120},
		Tier("basic"):           {MS: 100, Value: "1.0"},
	} {
		if r, ok := l.Get(key); !ok || r != want {
			t.Errorf("%q: %+v %v, want %+v", key, r, ok, want)
		}
	}
	if !l.Seen("m-1", t0) || !l.Seen("m-2", t0-3*hourMS) || !l.Seen("id\u00a0x", t0) || l.Seen("m-3", t0) {
		t.Error("seen")
	}
	if _, ok := l.Get(Tenant("t2")); ok {
		t.Error("a record from nowhere")
	}
}

func itoa(ms int64) string { return strconv.FormatInt(ms, 10) }

// TestImportRefusesGarbage: nothing is recorded from files that do not
// parse.
func TestImportRefusesGarbage(t *testing.T) {
	for _, bad := range [][2]string{{"t1\n", ""}, {"t1 soon\n", ""}, {"t1 12 1.0 extra\n", ""}, {"t1 5\n", "m\n"}} {
		l := Open(nil)
		err := l.Import([]byte(bad[0]), []byte(bad[1]))
		if !IsCorrupt(err) {
			t.Errorf("Import(%q): %v, want ErrCorrupt", bad, err)
		}
		if c := l.Changes(); len(c) != 0 {
			t.Errorf("Import(%q) recorded %d groups", bad, len(c))
		}
	}
}

// TestPercentNamesWrittenBeforeEscapingAreStillFound: a pooled environment
// named with a "%" (say "pool%1", from pool%1.yaml) was recorded by the
// version before escaping as "env/pool%1", where Env() now gives
// "env/pool%251". Were the record not found, a deployment sent before the
// recorded one, arriving late, would not be stale and would roll the
// environment back.
func TestPercentNamesWrittenBeforeEscapingAreStillFound(t *testing.T) {
	l := imported(t, legacyTargetsHeader+"env/pool%1 200\n", "")
	if !l.Stale(Env("pool%1"), 100) {
		t.Errorf("a message sent at 100 is not stale for env pool%%1, recorded at 200 by the previous version (key looked up: %q)", Env("pool%1"))
	}
}

// TestFilesWrittenBeforeReadBackExactly: lines as the version before
// escaping wrote them (names as they were) and as the first version with
// escaping wrote them (Unicode white space kept as it is, which it could
// not read back) are found under the name they were written for, and
// written in the current form. The one ambiguous form, an old name holding
// what escape() writes ("%20"), is read as escaped: that rule is pinned
// here. Group files read such lines the same way.
func TestFilesWrittenBeforeReadBackExactly(t *testing.T) {
	for _, c := range []struct {
		line string // as written
		name string // the pooled environment it was written for
	}{
		// Before escaping: names as they were.
		{"env/pool%1 200", "pool%1"},
		{"env/pool% 200", "pool%"},
		{"env/%% 200", "%%"},
		{"env/pool%zz 200", "pool%zz"},
		{"env/pool%41 200", "pool%41"},             // escape() never writes %41: 'A' needs none
		{"env/pool%0a 200", "pool%0a"},             // escape() writes upper-case hex only
		{"env/a\x01b 200", "a\x01b"},               // control bytes other than blanks were one field
		{"env/a\x7fb 200", "a\x7fb"},               // and so was DEL
		{"env/caf\xe9 200", "caf\xe9"},             // invalid UTF-8
		{"env/pool\u00a0two 200", "pool\u00a0two"}, // both versions wrote this; neither read it back
		// Since escaping.
		{"env/pool%251 200", "pool%1"},
		{"env/pool%20two 200", "pool two"},
		{"env/pool%09three%25 200", "pool\tthree%"},
		{"env/pool%20a 200", "pool a"}, // ambiguous: read as escaped, never as "pool%20a"
	} {
		l := Open(nil)
		if err := l.Import([]byte(legacyTargetsHeader+c.line+"\n"), nil); err != nil {
			t.Errorf("%q: %v", c.line, err)
			continue
		}
		if r, ok := l.Get(Env(c.name)); !ok || r.MS != 200 {
			t.Errorf("%q: no record for %q (key %q): %+v %v", c.line, c.name, Env(c.name), r, ok)
		}
		p := targetPath(Env(c.name))
		_, body, _ := strings.Cut(string(l.Changes()[p]), "\n")
		if want := Env(c.name) + " 200\n"; body != want {
			t.Errorf("%q: written as %q, want %q", c.line, body, want)
		}
		// The same line in the group file of its name.
		tr := newTree()
		tr.files[p] = []byte("# by hand\n" + c.line + "\n")
		if r, ok := Open(tr).Get(Env(c.name)); !ok || r.MS != 200 {
			t.Errorf("%q in %s: no record for %q: %+v %v", c.line, p, c.name, r, ok)
		}
	}
	if l := imported(t, "env/pool%20a 200\n", ""); l.Stale(Env("pool%20a"), 100) {
		t.Error("env/pool%20a was read as the name pool%20a; the rule is: as escaped (pool a)")
	}
}

// TestOldAndCurrentFormOfOneNameMerge: the version with escaping did not
// find an old record "env/pool%1" and wrote "env/pool%251" beside it. Both
// are the one target: the newer record counts, in whichever order.
func TestOldAndCurrentFormOfOneNameMerge(t *testing.T) {
	for _, lines := range []string{"env/pool%1 200 2.0\nenv/pool%251 150 1.0\n", "env/pool%251 150 1.0\nenv/pool%1 200 2.0\n"} {
		l := Open(nil)
		if err := l.Import([]byte(lines), nil); err != nil {
			t.Fatal(err)
		}
		if r, ok := l.Get(Env("pool%1")); !ok || r != (Record{MS: 200, Value: "2.0"}) {
			t.Errorf("%q: %+v %v", lines, r, ok)
		}
		c := l.Changes()
		if _, body, _ := strings.Cut(string(c[targetPath(Env("pool%1"))]), "\n"); len(c) != 1 || body != "env/pool%251 200 2.0\n" {
			t.Errorf("%q: written as %q", lines, c)
		}
	}
}

// TestMessageIDsAreKeptAsWritten: only target names are escaped and read
// back in their current form; message ids are compared exactly.
func TestMessageIDsAreKeptAsWritten(t *testing.T) {
	l := imported(t, "", "id%20x 5\nid\u00a0y 6\n")
	if !l.Seen("id%20x", 5) || l.Seen("id x", 5) || !l.Seen("id\u00a0y", 6) {
		t.Fatal("message ids changed on reading")
	}
}
