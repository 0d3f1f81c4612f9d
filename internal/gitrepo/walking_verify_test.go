package gitrepo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestEveryLedgerAlonePushConfirmsMain.
//
// Defect (26fa11a, push.go commands + pushWalking): a push that moves only
// the ledger names main from its commit to itself so that the atomic push
// holds only while main is where the records were decided. sendPack sends
// that command and receive-pack checks it inside the ref transaction. The
// walking push (go-git's own push: Options.WalkingPush, and every push of
// commits this Repo did not write) turns it into a refspec
// "<main>:refs/heads/main" plus RequireRemoteRefs: go-git drops a refspec
// whose local and remote hash are equal, so the pushed request has the
// ledger command alone, and main is checked only against the advertisement
// read before the pack is sent. A writer that moves main between that read
// and the server's ref update (here: a pre-receive hook, i.e. during the
// push) does not stop the ledger record from landing on a branch that
// changed meanwhile, the case the verify command exists for.
//
// Expected: the ledger-alone push fails as a lost race (IsConflict) and the
// ledger branch stays where it was, as with sendPack.
func TestEveryLedgerAlonePushConfirmsMain(t *testing.T) {
	for _, walking := range []bool{false, true} {
		name := "sendPack"
		if walking {
			name = "walking"
		}
		t.Run(name, func(t *testing.T) {
			srv, url := startServer(t)
			r, err := Open(context.Background(), Options{URL: url, Branch: "main", LedgerBranch: "tenant-worker/ledger",
				Username: "admin", Token: token, AuthorName: "admin", AuthorEmail: "admin@example.com", WalkingPush: walking})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			main0 := r.Head()
			l1, _ := r.Commit(plumbing.ZeroHash, map[string][]byte{"messages/1": []byte("m1 1\n")}, "record")
			if err := r.PushRefs(ctx, Move{main0, main0}, Move{plumbing.ZeroHash, l1}); err != nil {
				t.Fatal(err)
			}
			// Another writer's commit, which the hook makes main during the next push.
			git := func(args ...string) string {
				out, err := srv.Output("gitops.git", args...)
				if err != nil {
					t.Fatalf("git %v: %v", args, err)
				}
				return strings.TrimSpace(out)
			}
			git("update-ref", "refs/heads/other", main0.String())
			if err := srv.WriteFile("gitops.git", "other", "a/hand.yaml", "by hand\n", "a hand edit"); err != nil {
				t.Fatal(err)
			}
			other := git("rev-parse", "refs/heads/other")
			hook := filepath.Join(srv.RepoPath("gitops.git"), "hooks", "pre-receive")
			script := "#!/bin/sh\ncat >/dev/null\nrm -f \"$0\"\nunset GIT_QUARANTINE_PATH\n" +
				"git update-ref refs/heads/main " + other + " " + main0.String() + " >&2\n"
			if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			l2, _ := r.Commit(l1, map[string][]byte{"messages/2": []byte("m2 2\n")}, "record 2")
			err = r.PushRefs(ctx, Move{main0, main0}, Move{l1, l2})
			if got := git("rev-parse", "refs/heads/main"); got != other {
				t.Fatalf("the hook did not move main (main at %s)", got)
			}
			if got := git("rev-parse", "refs/heads/tenant-worker/ledger"); got != l1.String() || !IsConflict(err) {
				t.Fatalf("ledger-alone push while main moved: err %v, ledger at %s (want a lost race, ledger at %s)", err, got, l1)
			}
		})
	}
}
