package validate

import (
	"fmt"
	"strings"
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

// TestLabelsWithFieldsChangeIds: a labels entry's fields (custom
// fieldSpecs) can write a pair at metadata, into metadata.name or
// metadata.namespace. Two new Secrets that the parts would keep apart
// (aa.yaml first, zz.yaml last, 2*buildPart tenants between them) become
// one id in kustomize's build: kustomize refuses the tree, and so does the
// check (found by review: labels were first taken as id-neutral whatever
// their fields).
func TestLabelsWithFieldsChangeIds(t *testing.T) {
	tests := []struct {
		name, aa, zz, kustomization string
	}{
		{"one name", secret("a", ""), secret("z", ""), renameFields("name", "same")},
		{"one namespace", secret("clash", "a"), secret("clash", "b"), renameFields("namespace", "same")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := large(t, 100)
			dir := root + "/tenants/premium"
			kpath := dir + "/kustomization.yaml"
			changed := []string{kpath}
			add := func(name, content string) {
				m[dir+"/"+name] = &fstest.MapFile{Data: []byte(content)}
				m[kpath].Data = append(m[kpath].Data, "\n  - "+name...)
				changed = append(changed, dir+"/"+name)
			}
			add("aa.yaml", tt.aa)
			for i := range 2 * buildPart {
				add(fmt.Sprintf("new-%d.yaml", i), tenant(t, m, "premium", fmt.Sprintf("new-%d", i)))
			}
			add("zz.yaml", tt.zz)
			m[kpath].Data = append(m[kpath].Data, "\n"+tt.kustomization...)
			src := indexFS{gitops.FS{FS: m}, m}
			if err := Build(src, root+"/tenants"); err == nil || !strings.Contains(err.Error(), "already registered id") {
				t.Fatalf("setup: kustomize builds the whole tree: %v", err)
			}
			err := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, changed)
			if err == nil {
				t.Fatalf("kustomize refuses the tree (two Secrets made one id by labels[].fields), the check accepts it")
			}
		})
	}
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
