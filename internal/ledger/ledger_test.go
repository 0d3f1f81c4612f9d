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
