package clip

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tenant-worker/tenant-worker/internal/redact"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"héllo", 2, "h…"}, // é is two bytes: never split
	} {
		got := String(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("String(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestStringCutsNoSecret: a secret that the cut would split is blanked
// whole; its first part is not shown.
func TestStringCutsNoSecret(t *testing.T) {
	const secret = "tok-7f3a9c1e+never/print=me"
	redact.Add(secret)
	in := "push refused: https://worker:" + secret + "@git.example.com/x.git"
	n := strings.Index(in, secret) + 12
	got := String(in, n)
	if strings.Contains(got, secret[:8]) || !strings.HasPrefix(got, "push refused: https://worker:[") {
		t.Errorf("String(%q, %d) = %q: shows part of the secret", in, n, got)
	}
}
