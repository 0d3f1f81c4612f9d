package ledger

import (
	"strings"
	"testing"
)

// reread is l committed to a new tree and opened again.
func reread(t *testing.T, l *Ledger) (*Ledger, *tree) {
	t.Helper()
	tr := newTree()
	return commit(t, l, tr), tr
}

// TestNamesWithBlanksStayOneField: a pooled environment written by hand
// as "pool 2.yaml" (or with a tab, or a "%") keeps the ledger readable.
func TestNamesWithBlanksStayOneField(t *testing.T) {
	l := Open(nil)
	names := []string{"pool 2", "pool\t3", "pool%4", "pool-5"}
	for i, n := range names {
		l.Set(Env(n), int64(100+i), "")
	}
	again, _ := reread(t, l)
	for i, n := range names {
		if r, ok := again.Get(Env(n)); !ok || r.MS != int64(100+i) {
			t.Errorf("%q: %+v %v", n, r, ok)
		}
	}
	if err := again.Err(); err != nil {
		t.Fatalf("the ledger no longer parses: %v", err)
	}
	if Env("pool-5") != "env/pool-5" {
		t.Errorf("a plain name changed form: %s", Env("pool-5"))
	}
}

// TestNamesWithUnicodeSpacesStayOneField: escape() keeps Unicode white
// space (U+00A0, U+0085, U+2003, U+3000...) as it is, so the reader must
// split fields at ASCII blanks only. When it split at Unicode white space
// too (strings.Fields), a pooled environment named by hand "pool\u00a0two"
// was written as one field and read back as two: the targets file no
// longer parsed and every later message failed on the ledger (the worker
// paused) until someone edited the file by hand.
func TestNamesWithUnicodeSpacesStayOneField(t *testing.T) {
	for _, name := range []string{"pool\u00a0two", "pool\u2003three", "pool\u3000four", "pool\u0085five", "\u2028six\u00a0"} {
		l := Open(nil)
		l.Set(Env(name), 100, "")
		again, _ := reread(t, l)
		if r, ok := again.Get(Env(name)); !ok || r.MS != 100 {
			t.Errorf("%q: record lost: %+v %v", name, r, ok)
		}
		if err := again.Err(); err != nil {
			t.Errorf("%q: the ledger no longer parses: %v", name, err)
		}
	}
}

// roundTripNames are byte strings a name may be: blanks, Unicode white
// space, invalid UTF-8, what escape() writes and what it never writes.
var roundTripNames = []string{
	"", "pool", "pool two", "pool\ttwo", "pool\r\n", "\x00", "\x7f", "#pool",
	"pool\u00a0two", "pool\u0085", "\u2028", "pool\u3000four", "\xff\xfe", "caf\xe9", "\xc2",
	"%", "%%", "%2", "%41", "%2541", "%25", "%20", "%0a", "%0A", "%zz", "100%",
}

// TestAnyNameRoundTrips: every name is written as one field, read back
// under the key it was written for, and kept apart from every other name.
func TestAnyNameRoundTrips(t *testing.T) {
	for _, a := range roundTripNames {
		for _, b := range roundTripNames {
			checkRoundTrip(t, a, b)
		}
	}
	// Longer than a line could be when bufio.Scanner read them (1 MiB).
	checkRoundTrip(t, strings.Repeat("\u00a0%", 1<<18), "pool")
}

// FuzzAnyNameRoundTrips is TestAnyNameRoundTrips over any two byte strings.
func FuzzAnyNameRoundTrips(f *testing.F) {
	for i, a := range roundTripNames {
		f.Add(a, roundTripNames[(i+1)%len(roundTripNames)])
	}
	f.Fuzz(checkRoundTrip)
}

func checkRoundTrip(t *testing.T, a, b string) {
	t.Helper()
	if got := unescape(escape(a)); got != a {
		t.Fatalf("unescape(escape(%q)) = %q", a, got)
	}
	if (a == b) != (Env(a) == Env(b)) {
		t.Fatalf("names %q and %q share a key or one name has two: %q %q", a, b, Env(a), Env(b))
	}
	l := Open(nil)
	l.Set(Env(a), 100, "")
	l.Set(Tier(a), 100, "1.0")
	if a != b {
		l.Set(Env(b), 200, "")
	}
	again, tr := reread(t, l)
	if r, ok := again.Get(Env(a)); !ok || r.MS != 100 {
		t.Fatalf("%q: %+v %v", a, r, ok)
	}
	if r, ok := again.Get(Tier(a)); !ok || r != (Record{MS: 100, Value: "1.0"}) {
		t.Fatalf("tier %q: %+v %v", a, r, ok)
	}
	if r, ok := again.Get(Env(b)); a != b && (!ok || r.MS != 200) {
		t.Fatalf("%q: %+v %v", b, r, ok)
	}
	if err := again.Err(); err != nil {
		t.Fatalf("%q, %q: the ledger no longer parses: %v", a, b, err)
	}
	// A second round trip writes the same files.
	for _, g := range again.groups {
		g.dirty = true
	}
	for p, content := range again.Changes() {
		if string(content) != string(tr.files[p]) {
			t.Fatalf("%q, %q: a second round trip changed %s:\n%q\n%q", a, b, p, tr.files[p], content)
		}
	}
}
