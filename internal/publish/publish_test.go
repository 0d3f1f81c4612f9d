package publish

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestServeKeepsWhatAnObjectMayPointAt: each folder's current archive and
// the one before are served; a folder back to content it had serves that
// archive again; an archive two folders share stays while either needs it.
func TestServeKeepsWhatAnObjectMayPointAt(t *testing.T) {
	p := New(Options{})
	get := func(file string) int {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+file, nil))
		return rec.Code
	}
	p.serve("a", "1.tar.gz", []byte("one"))
	p.serve("a", "2.tar.gz", []byte("two"))
	p.serve("a", "1.tar.gz", []byte("one")) // back to where it was
	if get("1.tar.gz") != 200 || get("2.tar.gz") != 200 {
		t.Fatalf("after 1, 2, 1: %d %d, want both served", get("1.tar.gz"), get("2.tar.gz"))
	}
	p.serve("a", "3.tar.gz", []byte("three"))
	if get("2.tar.gz") != 404 || get("1.tar.gz") != 200 || get("3.tar.gz") != 200 {
		t.Fatalf("after 1, 2, 1, 3: 1 %d, 2 %d, 3 %d; want 2 dropped", get("1.tar.gz"), get("2.tar.gz"), get("3.tar.gz"))
	}
	p.serve("b", "3.tar.gz", []byte("three"))
	p.serve("a", "4.tar.gz", []byte("four"))
	p.serve("a", "5.tar.gz", []byte("five"))
	if get("3.tar.gz") != 200 {
		t.Fatal("an archive folder b points at was dropped with folder a's old ones")
	}
	if get("1.tar.gz") != 404 {
		t.Fatal("an archive nobody points at is still served")
	}
}
