package cli

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// layoutRepo serves a branch with n premium tenants in the platform's
// layout, and returns the server and the CLI's environment.
func layoutRepo(t *testing.T, n int) (*gitserver.Server, map[string]string) {
	t.Helper()
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("tenant-%d", i)
	}
	seed, err := templates.WithTenants("premium", ids...)
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
	return srv, map[string]string{"GIT_REPO_URL": url, "GIT_TOKEN_FILE": tokenFile}
}

func render(files map[string][]byte, tier, id string) string {
	tmpl := string(files[templates.Root+"/tier-templates/"+tier+"_tenant_template.yaml"])
	return strings.NewReplacer("{TENANT_ID}", id, "{RELEASE_VERSION}", "0.0").Replace(tmpl)
}

func runCLI(env map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

// TestLayoutMigrateOnABusyBranch: a migration that a worker's push
// overtakes starts again from it and moves that tenant too; a dry run and
// a refused migration push nothing; migrating back restores the layout.
func TestLayoutMigrateOnABusyBranch(t *testing.T) {
	srv, env := layoutRepo(t, 30)
	head := func() string { out, _ := srv.Output("gitops.git", "rev-parse", "main"); return strings.TrimSpace(out) }
	tree := func() string { out, _ := srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main"); return out }

	start := head()
	if code, out, errOut := runCLI(env, "layout", "migrate", "--shards", "4", "--dry-run"); code != 0 || !strings.Contains(out, "nothing was pushed") || head() != start {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCLI(env, "layout", "migrate", "--shards", "101"); code != 2 {
		t.Fatalf("--shards 101: exit %d, %s", code, errOut)
	}

	// A worker onboards tenant "late" as the migration pushes.
	files, _ := templates.Files()
	var fired atomic.Int32
	srv.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && fired.Add(1) == 1 {
			k, _ := srv.Output("gitops.git", "show", "main:"+templates.Root+"/tenants/premium/kustomization.yaml")
			for p, c := range map[string]string{
				"tenants/premium/late.yaml":          render(files, "premium", "late"),
				"tenants/premium/kustomization.yaml": k + "  - late.yaml\n",
			} {
				if err := srv.WriteFile("gitops.git", "main", templates.Root+"/"+p, c, "a worker's onboarding"); err != nil {
					t.Error(err)
				}
			}
		}
		return true
	})
	code, out, errOut := runCLI(env, "layout", "migrate", "--shards", "4")
	if code != 0 || !strings.Contains(errOut, "starting again") {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	if fired.Load() < 2 {
		t.Fatalf("the overtaking push was planned but the migration pushed %d times", fired.Load())
	}
	l := gitops.Layout{Root: templates.Root, Shards: 4}
	ls := tree()
	for i := range 31 {
		id := fmt.Sprintf("tenant-%d", i)
		if i == 30 {
			id = "late"
		}
		if !strings.Contains(ls, l.TenantFile("premium", id)+"\n") {
			t.Errorf("%s is not at %s", id, l.TenantFile("premium", id))
		}
		if strings.Contains(ls, templates.Root+"/tenants/premium/"+id+".yaml\n") {
			t.Errorf("%s is still in the tier's folder", id)
		}
	}
	if code, out, _ := runCLI(env, "layout", "show"); code != 0 || !strings.Contains(out, "4 shard folders") {
		t.Errorf("layout show: exit %d, %s", code, out)
	}

	// And back, while nothing else pushes.
	srv.SetHook(nil)
	if code, out, errOut := runCLI(env, "layout", "migrate", "--shards", "0"); code != 0 {
		t.Fatalf("migrate back: exit %d\n%s%s", code, out, errOut)
	}
	ls = tree()
	if strings.Contains(ls, "/shard-") || strings.Contains(ls, l.LayoutFile()) || !strings.Contains(ls, templates.Root+"/tenants/premium/late.yaml\n") {
		t.Errorf("after migrating back:\n%s", ls)
	}

	// A listed tenant whose file is gone: the move would hide it.
	k, _ := srv.Output("gitops.git", "show", "main:"+templates.Root+"/tenants/premium/kustomization.yaml")
	if err := srv.WriteFile("gitops.git", "main", templates.Root+"/tenants/premium/kustomization.yaml", k+"  - ghost.yaml\n", "break the tier"); err != nil {
		t.Fatal(err)
	}
	broken := head()
	if code, _, errOut := runCLI(env, "layout", "migrate", "--shards", "4"); code != 1 || head() != broken || !strings.Contains(errOut, "ghost.yaml") {
		t.Fatalf("migrating a broken tier: exit %d, head moved: %v\n%s", code, head() != broken, errOut)
	}
}
