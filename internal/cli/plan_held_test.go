package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestPlanOfAMessageTheWorkerHolds.
//
// Found by review: `tenant-worker plan` runs the pipeline without a send time, so
// without the ledger, and then the held rule does not exist: an onboarding
// of a tenant to another tier than the one it is in (the second half of a
// move, which the worker holds until the offboarding arrives, outcome
// "held", `send --wait` exit 3) is reported as "the worker would refuse
// this message: tier_conflict", exit 1. The usage promises exit 1 only
// "if the worker would refuse the message". An operator who plans a move
// before sending it is told it will be dead-lettered.
//
// Expected: plan does not say the worker would refuse a message the worker
// holds (it says it would be held, or shows what it waits for).
func TestPlanOfAMessageTheWorkerHolds(t *testing.T) {
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	seed, err := templates.WithTenants("premium", "tenant-1")
	if err != nil {
		t.Fatal(err)
	}
	url, err := srv.CreateRepo("gitops.git", "main", seed)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GIT_REPO_URL": url, "GIT_TOKEN_FILE": tokenFile,
		"ONBOARDING_QUEUE": "on", "OFFBOARDING_QUEUE": "off", "DEPLOYMENT_QUEUE": "dep",
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"plan", "onboarding", "--tenant-id", "tenant-1", "--tier", "basic", "--release", "0.0"},
		&out, &errOut, func(k string) string { return env[k] })
	if code == 1 && strings.Contains(errOut.String(), "would refuse") {
		t.Fatalf("plan of the onboarding half of a move (which the worker holds): exit %d\nstdout: %s\nstderr: %s",
			code, out.String(), errOut.String())
	}
}
