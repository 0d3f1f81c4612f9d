package ledger

import (
	"strings"
	"testing"
)

func TestRoundTripAndRules(t *testing.T) {
	l, err := Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Touch(Tenant("t1"), 100)
	l.Set(Tier("basic"), 50, "1.0")
	l.Note("m1", 100)
	l.Note("m0", 90)
	if l.Stale(Tenant("t1"), 100) || !l.Stale(Tenant("t1"), 99) || l.Stale(Tenant("t2"), 1) {
		t.Fatal("stale: equal times are not stale, older ones are, unknown targets never")
	}
	l.Touch(Tenant("t1"), 80) // never moves back
	if !l.Stale(Tenant("t1"), 99) {
		t.Fatal("a touch with an older time moved the record back")
	}
	targets, messages := l.Files()
	back, err := Parse(targets, messages)
	if err != nil {
		t.Fatal(err)
	}
	t2, m2 := back.Files()
	if string(t2) != string(targets) || string(m2) != string(messages) {
		t.Fatalf("round trip changed the files:\n%s\n%s", t2, m2)
	}
	if !strings.HasSuffix(string(messages), "m1 100\nm0 90\n") {
		t.Fatalf("messages not in the order noted:\n%s", messages)
	}
	if !back.Seen("m0") || back.Seen("m2") {
		t.Fatal("seen")
	}
	if r, ok := back.Get(Tier("basic")); !ok || r.MS != 50 || r.Value != "1.0" {
		t.Fatalf("tier record %+v", r)
	}
}

func TestPruneWaitsForTheSlackThenDropsWhatNoMessageCanNeed(t *testing.T) {
	l, _ := Parse(nil, nil)
	l.Touch(Tenant("old"), 100)
	l.Note("old", 100)
	l.Touch(Tenant("new"), 1000)
	l.Note("new", 1000)
	l.Prune(150, 100) // oldest (100) is not older than 150-100: keep all
	if !l.Seen("old") {
		t.Fatal("pruned before the slack passed")
	}
	l.Prune(250, 100)
	if l.Seen("old") || !l.Seen("new") || l.Stale(Tenant("old"), 0) == true {
		t.Fatal("prune kept what expired or dropped what did not")
	}
	_, messages := l.Files()
	if strings.Contains(string(messages), "\nold 100") {
		t.Fatalf("an expired id is still written:\n%s", messages)
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	for _, bad := range []string{"t1\n", "t1 soon\n", "t1 12 1.0 extra\n"} {
		if _, err := Parse([]byte(bad), nil); err == nil {
			t.Errorf("Parse(%q): want an error", bad)
		}
	}
}

// TestNamesWithBlanksStayOneField: a pooled environment written by hand
// as "pool 2.yaml" (or with a tab, or a "%") keeps the ledger readable.
func TestNamesWithBlanksStayOneField(t *testing.T) {
	l, err := Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"pool 2", "pool\t3", "pool%4", "pool-5"}
	for i, n := range names {
		l.Set(Env(n), int64(100+i), "")
	}
	targets, messages := l.Files()
	again, err := Parse(targets, messages)
	if err != nil {
		t.Fatalf("the ledger no longer parses: %v\n%s", err, targets)
	}
	for i, n := range names {
		if r, ok := again.Get(Env(n)); !ok || r.MS != int64(100+i) {
			t.Errorf("%q: %+v %v", n, r, ok)
		}
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
		l, err := Parse(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Set(Env(name), 100, "")
		targets, messages := l.Files()
		again, err := Parse(targets, messages)
		if err != nil {
			t.Errorf("%q: the ledger no longer parses: %v", name, err)
			continue
		}
		if r, ok := again.Get(Env(name)); !ok || r.MS != 100 {
			t.Errorf("%q: record lost: %+v %v", name, r, ok)
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
	written := []byte(targetsHeader + "env/pool%1 200\n")
	l, err := Parse(written, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Stale(Env("pool%1"), 100) {
		t.Errorf("a message sent at 100 is not stale for env pool%%1, recorded at 200 by the previous version (key looked up: %q)", Env("pool%1"))
	}
}

// TestFilesWrittenBeforeReadBackExactly: lines as the version before
// escaping wrote them (names as they were) and as the first version with
// escaping wrote them (Unicode white space kept as it is, which it could
// not read back) are found under the name they were written for, and the
// next write gives them the current form. The one ambiguous form, an old
// name holding what escape() writes ("%20"), is read as escaped: that rule
// is pinned here.
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
		l, err := Parse([]byte(targetsHeader+c.line+"\n"), nil)
		if err != nil {
			t.Errorf("%q: %v", c.line, err)
			continue
		}
		if r, ok := l.Get(Env(c.name)); !ok || r.MS != 200 {
			t.Errorf("%q: no record for %q (key %q): %+v %v", c.line, c.name, Env(c.name), r, ok)
		}
		targets, _ := l.Files()
		if want := targetsHeader + Env(c.name) + " 200\n"; string(targets) != want {
			t.Errorf("%q: rewritten as %q, want %q", c.line, targets, want)
		}
	}
	if l, _ := Parse([]byte("env/pool%20a 200\n"), nil); l.Stale(Env("pool%20a"), 100) {
		t.Error("env/pool%20a was read as the name pool%20a; the rule is: as escaped (pool a)")
	}
}

// TestOldAndCurrentFormOfOneNameMerge: the version with escaping did not
// find an old record "env/pool%1" and wrote "env/pool%251" beside it. Both
// are the one target: the newer record counts, in whichever order.
func TestOldAndCurrentFormOfOneNameMerge(t *testing.T) {
	for _, lines := range []string{"env/pool%1 200 2.0\nenv/pool%251 150 1.0\n", "env/pool%251 150 1.0\nenv/pool%1 200 2.0\n"} {
		l, err := Parse([]byte(lines), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := l.Get(Env("pool%1")); !ok || r != (Record{MS: 200, Value: "2.0"}) {
			t.Errorf("%q: %+v %v", lines, r, ok)
		}
		if targets, _ := l.Files(); string(targets) != targetsHeader+"env/pool%251 200 2.0\n" {
			t.Errorf("%q: written as %q", lines, targets)
		}
	}
}

// TestMessageIDsAreKeptAsWritten: only target names are escaped and read
// back in their current form; message ids are compared exactly.
func TestMessageIDsAreKeptAsWritten(t *testing.T) {
	l, err := Parse(nil, []byte("id%20x 5\nid\u00a0y 6\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Seen("id%20x") || l.Seen("id x") || !l.Seen("id\u00a0y") {
		t.Fatal("message ids changed on reading")
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
	l, err := Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Set(Env(a), 100, "")
	l.Set(Tier(a), 100, "1.0")
	if a != b {
		l.Set(Env(b), 200, "")
	}
	targets, messages := l.Files()
	again, err := Parse(targets, messages)
	if err != nil {
		t.Fatalf("%q, %q: the ledger no longer parses: %v", a, b, err)
	}
	if r, ok := again.Get(Env(a)); !ok || r.MS != 100 {
		t.Fatalf("%q: %+v %v", a, r, ok)
	}
	if r, ok := again.Get(Tier(a)); !ok || r != (Record{MS: 100, Value: "1.0"}) {
		t.Fatalf("tier %q: %+v %v", a, r, ok)
	}
	if r, ok := again.Get(Env(b)); a != b && (!ok || r.MS != 200) {
		t.Fatalf("%q: %+v %v", b, r, ok)
	}
	if t2, _ := again.Files(); string(t2) != string(targets) {
		t.Fatalf("%q, %q: a second round trip changed the file:\n%q\n%q", a, b, targets, t2)
	}
}
