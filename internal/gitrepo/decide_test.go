package gitrepo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// pkt frames s as a git pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// report writes a receive-pack answer with the given status lines, in the
// side-band the request asked for.
func report(w http.ResponseWriter, request []byte, lines ...string) {
	var inner strings.Builder
	for _, l := range lines {
		inner.WriteString(pkt(l + "\n"))
	}
	inner.WriteString("0000")
	body := inner.String()
	if bytes.Contains(request[:min(len(request), 1000)], []byte("side-band-64k")) {
		body = pkt("\x01"+body) + "0000"
	}
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	_, _ = io.WriteString(w, body)
}

// TestPushDecidedByServerState: whatever the server says, or does not say,
// about a push, its outcome is read from the branch afterwards. The reports
// are the texts of real git versions; the hook makes the state.
func TestPushDecidedByServerState(t *testing.T) {
	for _, tc := range []struct {
		name string
		// moveFirst commits as another writer before the push arrives.
		moveFirst bool
		// answer replies to the push instead of git; nil lets git answer.
		answer func(srv http.Handler, w http.ResponseWriter, r *http.Request, body []byte)
		want   string // "conflict", "success" or "error"
	}{
		{name: "git 2.39 refuses a stale old value", moveFirst: true, want: "conflict"},
		{name: "git 2.51 wording", moveFirst: true, want: "conflict",
			answer: func(_ http.Handler, w http.ResponseWriter, _ *http.Request, body []byte) {
				report(w, body, "unpack ok", "ng refs/heads/main incorrect old value provided")
			}},
		{name: "wording never seen before", moveFirst: true, want: "conflict",
			answer: func(_ http.Handler, w http.ResponseWriter, _ *http.Request, body []byte) {
				report(w, body, "unpack ok", "ng refs/heads/main the moon is in the wrong phase")
			}},
		{name: "nothing answered after the branch moved to ours", want: "success",
			answer: func(srv http.Handler, w http.ResponseWriter, r *http.Request, _ []byte) {
				srv.ServeHTTP(httptest.NewRecorder(), r) // git updates the branch; the answer is lost
			}},
		{name: "nothing answered and nothing done", want: "error",
			answer: func(http.Handler, http.ResponseWriter, *http.Request, []byte) {}},
		{name: "a stale-value report while the branch did not move", want: "error",
			answer: func(_ http.Handler, w http.ResponseWriter, _ *http.Request, body []byte) {
				report(w, body, "unpack ok", "ng refs/heads/main incorrect old value provided")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, url := startServer(t)
			r, err := open(t, url, "", token)
			if err != nil {
				t.Fatal(err)
			}
			parent := r.Head()
			c, err := r.Commit(parent, map[string][]byte{"a/mine.yaml": []byte("mine\n")}, "mine")
			if err != nil {
				t.Fatal(err)
			}
			var fired atomic.Int32
			srv.SetHook(func(w http.ResponseWriter, req *http.Request) bool {
				if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/git-receive-pack") {
					return true
				}
				fired.Add(1)
				body, err := io.ReadAll(req.Body)
				if err != nil {
					t.Error(err)
					return false
				}
				req.Body = io.NopCloser(bytes.NewReader(body))
				if tc.moveFirst {
					if err := srv.WriteFile("gitops.git", "main", "a/theirs.yaml", "theirs\n", "image automation"); err != nil {
						t.Error(err)
					}
				}
				if tc.answer == nil {
					return true
				}
				tc.answer(http.HandlerFunc(srv.Backend), w, req, body)
				return false
			})
			err = r.Push(context.Background(), parent, c)
			if fired.Load() != 1 {
				t.Fatalf("the hook saw %d pushes, want 1", fired.Load())
			}
			remote, _ := srv.Output("gitops.git", "rev-parse", "main")
			switch tc.want {
			case "conflict":
				if !IsConflict(err) {
					t.Fatalf("Push = %v, want a conflict", err)
				}
			case "success":
				if err != nil || strings.TrimSpace(remote) != c.String() || r.Head() != c {
					t.Fatalf("Push = %v (remote %s, head %s), want success at %s", err, remote, r.Head(), c)
				}
			default:
				if err == nil || IsConflict(err) || r.Head() != parent {
					t.Fatalf("Push = %v (head %s), want a plain failure", err, r.Head())
				}
			}
		})
	}
}

// TestRenamedRepositoryKeepsWorking: after a rename the server answers the
// old URL with 301, on every request. Every push after it lands, the move
// is reported once, and fetches follow.
func TestRenamedRepositoryKeepsWorking(t *testing.T) {
	srv, url := startServer(t)
	var moves []string
	r, err := Open(context.Background(), Options{URL: url, Branch: "main", Token: token,
		AuthorName: "admin", AuthorEmail: "admin@example.com",
		OnMoved: func(from, to string) { moves = append(moves, from+" -> "+to) }})
	if err != nil {
		t.Fatal(err)
	}
	push := func(i int) {
		t.Helper()
		parent := r.Head()
		c, err := r.Commit(parent, map[string][]byte{fmt.Sprintf("a/%d.yaml", i): []byte("x\n")}, "push")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Push(context.Background(), parent, c); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	push(0) // learns the server's capabilities
	if err := srv.Rename("gitops.git", "renamed.git"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		push(i)
	}
	if len(moves) != 1 || !strings.HasSuffix(moves[0], "/renamed.git") {
		t.Fatalf("moves reported: %v", moves)
	}
	if _, err := r.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	log, err := srv.Output("renamed.git", "log", "--format=%s", "main")
	if err != nil || strings.Count(log, "push\n") != 5 {
		t.Fatalf("pushes on the renamed repository: %q %v", log, err)
	}
}
