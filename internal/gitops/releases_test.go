package gitops_test

import (
	"path"

	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"os"
	"reflect"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestReleases: the HelmReleases of a change are read from the rendered
// files, and from the old file for an offboarding; the ledger and the
// kustomizations declare none.
func TestReleases(t *testing.T) {
	l := gitops.Layout{Root: templates.Root}
	r := gitops.FS{FS: templates.FS}
	on, err := l.Plan(r, message.Request{Kind: message.Onboarding, TenantID: "t1", Tier: "premium", ReleaseVersion: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	got := l.Releases(r, on.Files)
	want := []gitops.Release{{Path: l.TenantFile("premium", "t1"), Namespace: "flux-system", Name: "t1-premium", Version: "1.0.x"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("onboarding: %+v, want %+v", got, want)
	}
	if !l.Touches(on.Files) {
		t.Error("an onboarding touches nothing Flux applies")
	}

	// The offboarding reads the file it deletes from the tree before it.
	dir := t.TempDir()
	if err := os.CopyFS(dir, templates.FS); err != nil {
		t.Fatal(err)
	}
	for p, b := range on.Files {
		if err := os.WriteFile(dir+"/"+p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := gitops.FS{FS: os.DirFS(dir)}
	off, err := l.Plan(before, message.Request{Kind: message.Offboarding, TenantID: "t1", Tier: "premium"})
	if err != nil {
		t.Fatal(err)
	}
	got = l.Releases(before, off.Files)
	want[0].Gone = true
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("offboarding: %+v, want %+v", got, want)
	}
	// The migration removes the ledger that versions before the ledger
	// branch kept in the tree: nothing Flux applies.
	if l.Touches(map[string][]byte{path.Join(l.Root, ledger.LegacyDir): nil}) {
		t.Error("removing the old in-tree ledger touches what Flux applies")
	}
}

// TestTypes lists what the templates render, once each, placeholders and
// all: the platform's templates use HelmRelease v2beta1.
func TestTypes(t *testing.T) {
	l := gitops.Layout{Root: templates.Root}
	refs, err := l.Types(gitops.FS{FS: templates.FS})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range refs {
		k := r.APIVersion + " " + r.Kind
		if seen[k] {
			t.Errorf("%s listed twice", k)
		}
		seen[k] = true
	}
	for _, k := range []string{"helm.toolkit.fluxcd.io/v2beta1 HelmRelease", "v1 Namespace"} {
		if !seen[k] {
			t.Errorf("%s not listed: %+v", k, refs)
		}
	}
}

// TestTypesSeesAnAddedKind: a kind added at the end of a template is listed.
func TestTypesSeesAnAddedKind(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, templates.FS); err != nil {
		t.Fatal(err)
	}
	p := dir + "/" + templates.Root + "/tier-templates/basic_tenant_template.yaml"
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, "\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {TENANT_ID}-widget\n  namespace: flux-system\n"...)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	refs, err := gitops.Layout{Root: templates.Root}.Types(gitops.FS{FS: os.DirFS(dir)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if r.Kind == "Widget" && r.APIVersion == "example.com/v1" {
			return
		}
	}
	t.Fatalf("Widget not listed: %+v", refs)
}
