package validate

import (
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// renameFields is a labels entry whose custom fieldSpecs (labels[].fields,
// a documented kustomize field) write the pair into metadata of every
// Secret: the "label" key becomes metadata.<key>, so it sets a name or a
// namespace, that is an id.
func renameFields(key, value string) string {
	return "labels:\n  - pairs:\n      " + key + ": " + value + "\n    fields:\n      - kind: Secret\n        path: metadata\n"
}

func secret(name, ns string) string {
	s := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name + "\n"
	if ns != "" {
		s += "  namespace: " + ns + "\n"
	}
	return s
}

// TestLabelsWithFieldsKeepApart: the other way. The basic tier's labels
// rename its Secret, so kustomize keeps apart a Secret "settings" of no
// namespace (basic) and one of namespace default (premium) and builds the
// tree; the check, keying ids by the effective namespace only where no
// kustomization can change them, accepts it too (as with a namePrefix in
// TestLargeTreeIdsAsKustomizeReadsThem).
func TestLabelsWithFieldsKeepApart(t *testing.T) {
	m := large(t, 100)
	basic := root + "/tenants/basic/kustomization.yaml"
	m[root+"/tenants/basic/settings.yaml"] = &fstest.MapFile{Data: []byte(secret("settings", ""))}
	m[basic].Data = append(m[basic].Data, "\n  - settings.yaml\n"+renameFields("name", "basic-settings")...)
	dir := root + "/tenants/premium"
	kpath := dir + "/kustomization.yaml"
	m[dir+"/settings.yaml"] = &fstest.MapFile{Data: []byte(secret("settings", "default"))}
	m[kpath].Data = append(m[kpath].Data, "\n  - settings.yaml"...)
	src := indexFS{gitops.FS{FS: m}, m}
	if err := Build(src, root+"/tenants"); err != nil {
		t.Fatalf("setup: kustomize refuses the tree: %v", err)
	}
	if err := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, []string{dir + "/settings.yaml", kpath}); err != nil {
		t.Fatalf("kustomize builds the tree, the check refuses it: %v", err)
	}
}
