package validate

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// TestConfigurationsReachUp: kustomize merges a kustomization's
// transformer configurations (configurations:) up into every
// kustomization above it (ResAccumulator.MergeAccumulator), never down. A
// folder far down a tier's list, beyond the pruned build's context, with
// configurations that point commonLabels at metadata, makes the tier's
// commonLabels {name: same} rename both new Secrets of the change to one
// id: kustomize refuses the tree, and the check does too (found by review:
// the pruned build left the folder out, and its configurations with it).
func TestConfigurationsReachUp(t *testing.T) {
	m := large(t, 100)
	dir := root + "/tenants/premium"
	kpath := dir + "/kustomization.yaml"
	m[dir+"/extra/kustomization.yaml"] = &fstest.MapFile{Data: []byte("resources:\n  - cm.yaml\nconfigurations:\n  - cfg.yaml\n")}
	m[dir+"/extra/cm.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n")}
	m[dir+"/extra/cfg.yaml"] = &fstest.MapFile{Data: []byte("commonLabels:\n  - kind: Secret\n    path: metadata\n")}
	m[kpath].Data = append(m[kpath].Data, "\n  - extra"...)
	changed := []string{kpath}
	for _, f := range []struct{ name, content string }{{"aa.yaml", secret("a", "")}, {"zz.yaml", secret("z", "")}} {
		m[dir+"/"+f.name] = &fstest.MapFile{Data: []byte(f.content)}
		m[kpath].Data = append(m[kpath].Data, "\n  - "+f.name...)
		changed = append(changed, dir+"/"+f.name)
	}
	m[kpath].Data = append(m[kpath].Data, "\ncommonLabels:\n  name: same\n"...)
	src := indexFS{gitops.FS{FS: m}, m}
	if err := Build(src, root+"/tenants"); err == nil || !strings.Contains(err.Error(), "already registered id") {
		t.Fatalf("setup: kustomize does not refuse the whole tree for a duplicate id: %v", err)
	}
	if err := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, changed); err == nil {
		t.Fatalf("kustomize refuses the tree (extra's configurations make the tier's commonLabels rename both Secrets to one id), the check accepts it")
	}
}

// TestReadFieldsUpward: the fields kustomize hands up to the
// kustomizations above are found in any case kustomize reads them in.
func TestReadFieldsUpward(t *testing.T) {
	for rest, want := range map[string]bool{
		"":                                false,
		"commonLabels:\n  a: b\n":         false,
		"patches:\n  - path: p.yaml\n":    false,
		"configurations:\n  - cfg.yaml\n": true,
		"Configurations: [cfg.yaml]\n":    true,
		"crds:\n  - crd.json\n":           true,
		"CRDS: [crd.json]\n":              true,
	} {
		if _, got := readFields([]byte("resources:\n  - a.yaml\n" + rest)); got != want {
			t.Errorf("readFields(%q): upward %v, want %v", rest, got, want)
		}
	}
}
