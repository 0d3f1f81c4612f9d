package credentials

import (
	"os"
	"path/filepath"
	"testing"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

func password(t *testing.T, p Provider) string {
	t.Helper()
	a, err := p.Auth()
	if err != nil {
		t.Fatal(err)
	}
	if a == nil {
		return ""
	}
	return a.(*githttp.BasicAuth).Password
}

func TestFileIsReadAgainWhenItChangesOrIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var seen []string
	tok, err := File("admin", path, func(s string) { seen = append(seen, s) })
	if err != nil {
		t.Fatal(err)
	}
	if got := password(t, tok); got != "one" {
		t.Fatalf("token %q", got)
	}
	// A rotation that keeps size and time (a Secret volume swaps a link
	// atomically, but a copy may not) is still picked up after a refusal.
	st, _ := os.Stat(path)
	if err := os.WriteFile(path, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := password(t, tok); got != "one" {
		t.Fatalf("read again although nothing seemed to change: %q", got)
	}
	tok.Refused()
	if got := password(t, tok); got != "two" {
		t.Fatalf("after a refusal: %q", got)
	}
	// A change of size is seen at once.
	if err := os.WriteFile(path, []byte("three\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := password(t, tok); got != "three" {
		t.Fatalf("after a change: %q", got)
	}
	if len(seen) != 3 || seen[2] != "three" {
		t.Fatalf("secrets reported: %v", seen)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Auth(); err == nil {
		t.Fatal("an empty token file: want an error")
	}
}

func TestStatic(t *testing.T) {
	if got := password(t, Static("", " tok \n")); got != "tok" {
		t.Fatalf("token %q", got)
	}
	if a, err := Static("", "").Auth(); a != nil || err != nil {
		t.Fatalf("no token: %v %v", a, err)
	}
	if _, err := File("", filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Fatal("a missing file: want an error")
	}
}
