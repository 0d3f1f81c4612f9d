package bench

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// TestReplayPushesTheSameHistory: the replay ends with the fresh
// repository's branch and ledger branch where the source's are, in one push
// per batch of branch commits.
func TestReplayPushesTheSameHistory(t *testing.T) {
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := seedRepoLaid(srv, "src.git", 3, gitops.Layout{}); err != nil {
		t.Fatal(err)
	}
	head := func(repo, ref string) string {
		t.Helper()
		out, err := srv.Output(repo, "rev-parse", ref)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	seed := head("src.git", "main")
	if _, err := srv.Output("src.git", "branch", ledgerBranch, "main"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := srv.WriteFile("src.git", "main", fmt.Sprintf("m%d", i), "x", "message"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := srv.WriteFile("src.git", ledgerBranch, fmt.Sprintf("l%d", i), "x", "ledger"); err != nil {
			t.Fatal(err)
		}
	}
	h := ledgerHost{name: "http-backend", srv: srv, repo: func(k string) string { return k + ".git" },
		url: srv.RepoURL, path: srv.RepoPath, pushURL: srv.RepoURL}
	for _, squash := range []bool{false, true} {
		r, err := replayPushes(h, "src.git", seed, 2, 2, squash, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if r.Pushes != 3 || r.PerSecond <= 0 || r.LastOverFirst <= 0 {
			t.Errorf("replay (squashed: %v): %+v, want 3 pushes and rates", squash, r)
		}
		peer, rev := "ledger-peer.git", ""
		if squash {
			peer, rev = "ledger-peer-squashed.git", "^{tree}"
		}
		for _, ref := range []string{"main", ledgerBranch} {
			if got, want := head(peer, ref+rev), head("src.git", ref+rev); got != want {
				t.Errorf("%s replayed (squashed: %v) to %s, want %s", ref, squash, got, want)
			}
		}
		if squash {
			// One commit per push on the branch: 3 after the seed.
			if n, err := srv.Output(peer, "rev-list", "--count", seed+"..main"); err != nil || strings.TrimSpace(n) != "3" {
				t.Errorf("squashed branch has %q commits after the seed (%v), want 3", n, err)
			}
		}
	}
}
