package validate

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// indexFS is a map file system that also lists blob hashes, as a git
// snapshot does.
type indexFS struct {
	gitops.FS
	m fstest.MapFS
}

func (x indexFS) Entries(dir string) (map[string]string, []string, error) {
	entries, err := fs.ReadDir(x.m, dir)
	if err != nil {
		return nil, nil, err
	}
	files := map[string]string{}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
			continue
		}
		sum := sha1.Sum(x.m[dir+"/"+e.Name()].Data)
		files[e.Name()] = hex.EncodeToString(sum[:]) + "|" + dir + "/" + e.Name()
	}
	return files, dirs, nil
}

func (x indexFS) ReadBlob(hash string) ([]byte, error) {
	_, name, _ := strings.Cut(hash, "|")
	return fs.ReadFile(x.m, name)
}

// large is the reference tree with n premium tenants.
func large(t testing.TB, n int) fstest.MapFS {
	m := seed(t)
	k := root + "/tenants/premium/kustomization.yaml"
	var sb strings.Builder
	sb.Write(m[k].Data)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("seed-%d", i)
		m[root+"/tenants/premium/"+id+".yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", id))}
		sb.WriteString("\n  - " + id + ".yaml")
	}
	m[k].Data = []byte(sb.String())
	return m
}

func TestLargeTree(t *testing.T) {
	kpath := root + "/tenants/premium/kustomization.yaml"
	fpath := root + "/tenants/premium/new.yaml"
	tests := []struct {
		name    string
		edit    func(m fstest.MapFS)
		wantErr string
	}{
		{"valid", func(m fstest.MapFS) {}, ""},
		{"duplicate entry", func(m fstest.MapFS) { m[kpath].Data = append(m[kpath].Data, "\n  - seed-7.yaml"...) },
			"already registered id"},
		{"dangling entry", func(m fstest.MapFS) { m[kpath].Data = append(m[kpath].Data, "\n  - ghost.yaml"...) },
			"does not exist"},
		{"same resource in two files", func(m fstest.MapFS) {
			m[fpath].Data = []byte(strings.ReplaceAll(string(m[fpath].Data), "name: new", "name: seed-3"))
		}, "already registered id"},
		{"invalid kustomization", func(m fstest.MapFS) {
			m[kpath].Data = []byte(strings.Replace(string(m[kpath].Data), "kind: Kustomization", "kind: Kustomization\nresourcez: []", 1))
		}, "kustomize build"},
		{"malformed new file", func(m fstest.MapFS) { m[fpath].Data = []byte("kind: [\n") }, "new.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := large(t, fullBuildLimit+100)
			m[fpath] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", "new"))}
			m[kpath].Data = append(m[kpath].Data, "\n  - new.yaml"...)
			tt.edit(m)
			err := NewChecker(gitops.Layout{Root: root}).CheckDirs(indexFS{gitops.FS{FS: m}, m}, []string{fpath, kpath})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("CheckDirs: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("CheckDirs = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func BenchmarkCheckLarge(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := large(b, n)
			src := indexFS{gitops.FS{FS: m}, m}
			c := NewChecker(gitops.Layout{Root: root})
			changed := []string{root + "/tenants/premium/kustomization.yaml", root + "/tenants/premium/seed-1.yaml"}
			for b.Loop() {
				if err := c.CheckDirs(src, changed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDuplicateIndexAcrossChecks: one Checker sees a folder change over
// successive trees, as the worker does; its kept index must judge each
// tree as a fresh check would.
func TestDuplicateIndexAcrossChecks(t *testing.T) {
	kpath := root + "/tenants/premium/kustomization.yaml"
	c := NewChecker(gitops.Layout{Root: root})
	m := large(t, fullBuildLimit+10)
	check := func(step string, m fstest.MapFS, wantErr string) {
		t.Helper()
		err := c.CheckDirs(indexFS{gitops.FS{FS: m}, m}, []string{kpath})
		fresh := NewChecker(gitops.Layout{Root: root}).CheckDirs(indexFS{gitops.FS{FS: m}, m}, []string{kpath})
		if (err == nil) != (fresh == nil) {
			t.Fatalf("%s: kept index says %v, a fresh check %v", step, err, fresh)
		}
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Fatalf("%s: %v, want %q", step, err, wantErr)
		}
	}
	check("start", m, "")
	// seed-3's resources copied into a new file: a duplicate, refused.
	dup := root + "/tenants/premium/copy.yaml"
	m[dup] = &fstest.MapFile{Data: m[root+"/tenants/premium/seed-3.yaml"].Data}
	m[kpath].Data = append(m[kpath].Data, "\n  - copy.yaml"...)
	check("duplicate", m, "already registered id")
	check("duplicate again", m, "already registered id")
	// seed-3 removed: the copy now owns its ids.
	m[kpath].Data = []byte(strings.Replace(string(m[kpath].Data), "\n  - seed-3.yaml", "", 1))
	delete(m, root+"/tenants/premium/seed-3.yaml")
	check("moved", m, "")
	// seed-3 back, with other content: no clash.
	m[root+"/tenants/premium/seed-3.yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", "seed-3b"))}
	m[kpath].Data = append(m[kpath].Data, "\n  - seed-3.yaml"...)
	check("re-added", m, "")
	// The copy changed to clash with seed-5.
	m[dup].Data = m[root+"/tenants/premium/seed-5.yaml"].Data
	check("changed into a duplicate", m, "already registered id")
}

// TestDuplicateIndexRandomEdits: over random edits of a large folder
// (tenants added, removed, changed, listed twice, made duplicates of
// another, anywhere in the list), the kept index judges every tree as a
// fresh check does.
func TestDuplicateIndexRandomEdits(t *testing.T) {
	kpath := root + "/tenants/premium/kustomization.yaml"
	dir := root + "/tenants/premium/"
	c := NewChecker(gitops.Layout{Root: root})
	m := large(t, fullBuildLimit+10)
	seed := uint64(3)
	if s := os.Getenv("DUP_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	rng := rand.New(rand.NewPCG(seed, 4))
	entries := func() []string {
		var out []string
		for _, l := range strings.Split(string(m[kpath].Data), "\n") {
			if e, ok := strings.CutPrefix(l, "  - "); ok {
				out = append(out, e)
			}
		}
		return out
	}
	setEntries := func(es []string) {
		head, _, _ := strings.Cut(string(m[kpath].Data), "\n  - ")
		m[kpath].Data = []byte(head + "\n  - " + strings.Join(es, "\n  - "))
	}
	next := 0
	for step := range 60 {
		es := entries()
		i := rng.IntN(len(es))
		switch rng.IntN(5) {
		case 0: // a new tenant, anywhere in the list
			id := fmt.Sprintf("new-%d", next)
			next++
			m[dir+id+".yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", id))}
			setEntries(slices.Insert(es, i, id+".yaml"))
		case 1: // a tenant removed
			if es[i] != "dummy-configmap.yaml" {
				delete(m, dir+es[i])
				setEntries(slices.Delete(es, i, i+1))
			}
		case 2: // a tenant's content replaced by a fresh tenant's
			if es[i] != "dummy-configmap.yaml" {
				m[dir+es[i]] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", fmt.Sprintf("other-%d", step)))}
			}
		case 3: // a tenant's content copied from another: a duplicate
			j := rng.IntN(len(es))
			if es[i] != "dummy-configmap.yaml" && es[j] != "dummy-configmap.yaml" && i != j {
				m[dir+es[i]] = &fstest.MapFile{Data: m[dir+es[j]].Data}
			}
		case 4: // an entry listed twice, or a second listing taken out
			if n := strings.Count(string(m[kpath].Data), "\n  - "+es[i]+"\n"); n > 0 || rng.IntN(2) == 0 {
				setEntries(slices.Insert(es, rng.IntN(len(es)), es[i]))
			}
		}
		src := indexFS{gitops.FS{FS: m}, m}
		err := c.CheckDirs(src, []string{kpath})
		fresh := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, []string{kpath})
		if (err == nil) != (fresh == nil) {
			t.Fatalf("step %d: kept index says %v, a fresh check %v", step, err, fresh)
		}
		if err != nil && rng.IntN(2) == 0 {
			// Repair, as a human would: rebuild a clean folder.
			m = large(t, fullBuildLimit+10+step)
		}
	}
}

// TestLargeChangeIsBuiltInParts: a change of more paths than buildPart
// (a batch of new tenants, here a migration of 400 to shard folders) is
// built by kustomize in parts of at most buildPart, each of them: a shard
// list that only kustomize refuses (a patch file that is not there), in
// the folder that sorts last, is still refused.
func TestLargeChangeIsBuiltInParts(t *testing.T) {
	setup := func(t *testing.T) (fstest.MapFS, []string, gitops.Layout) {
		m := seed(t)
		l := gitops.Layout{Root: root}
		k := l.TierKustomization("premium")
		data := string(m[k].Data)
		for i := range 3*buildPart + 16 {
			id := fmt.Sprintf("seed-%d", i)
			m[l.TierDir("premium")+"/"+id+".yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", id))}
			data += "\n  - " + id + ".yaml"
		}
		m[k].Data = []byte(data)
		files, err := l.Migrate(gitops.FS{FS: m}, 100)
		if err != nil {
			t.Fatal(err)
		}
		l.Shards = 100
		return m, reviewApply(m, files), l
	}

	m, changed, l := setup(t)
	parts := buildParts(l.TenantsDir(), changed)
	var union []string
	for _, p := range parts {
		if len(p) == 0 || len(p) > buildPart {
			t.Errorf("a part of %d paths, want 1 to %d", len(p), buildPart)
		}
		union = append(union, p...)
	}
	if len(parts) < 3 || !slices.Equal(union, changed) {
		t.Fatalf("%d parts holding %d paths, want at least 3 holding the %d changed, in order", len(parts), len(union), len(changed))
	}
	if err := NewChecker(l).CheckDirs(indexFS{gitops.FS{FS: m}, m}, changed); err != nil {
		t.Fatalf("the migrated tree: %v", err)
	}

	m, changed, l = setup(t)
	last := path.Dir(changed[len(changed)-1]) + "/kustomization.yaml"
	if !slices.Contains(changed, last) || !strings.Contains(last, "/premium/") || last == l.TierKustomization("premium") {
		t.Fatalf("setup: the last changed folder's list %s is not a changed shard list", last)
	}
	m[last].Data = append(m[last].Data, "\npatches:\n  - path: missing-patch.yaml\n"...)
	err := NewChecker(l).CheckDirs(indexFS{gitops.FS{FS: m}, m}, changed)
	if err == nil || !strings.Contains(err.Error(), "kustomize build") {
		t.Fatalf("a shard list kustomize refuses, in the last part: %v", err)
	}
}

// TestLargeChangeClashesAcrossParts: two new resources that kustomize
// takes for one, in files that the parts of a large change keep apart
// (aa.yaml sorts first, zz.yaml last, 2*buildPart new tenants between
// them), are refused: by the id index when kustomize tells them apart by
// its effective namespace or a list's items, and by one build when a
// kustomization's patch makes them one, or labels with fields of their own
// (found by review: labels were first taken as id-neutral whatever their
// fields), or the tier's commonLabels pointed at names by the
// configurations of a folder far down its list, which kustomize hands up
// and a pruned build would leave out (found by review).
func TestLargeChangeClashesAcrossParts(t *testing.T) {
	cm := func(ns string) string {
		s := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: clash\n"
		if ns != "" {
			s += "  namespace: " + ns + "\n"
		}
		return s
	}
	// A folder listed before the change, beyond the pruned build's
	// context, whose configurations point commonLabels at metadata.
	upward := map[string]string{
		"kustomization.yaml": "resources:\n  - cm.yaml\nconfigurations:\n  - cfg.yaml\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n",
		"cfg.yaml":           "commonLabels:\n  - kind: Secret\n    path: metadata\n",
	}
	tests := []struct {
		name, aa, zz, kustomization string
		extra                       map[string]string // files of a folder extra/ listed first
	}{
		{"no namespace and default", cm(""), cm("default"), "", nil},
		{"a cluster-scoped kind with a namespace", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: clash\n",
			"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: clash\n  namespace: flux-system\n", "", nil},
		{"an item of a list", cm("default"), "apiVersion: v1\nkind: ConfigMapList\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: clash\n", "", nil},
		{"no namespace and default, beside labels and annotations", cm(""), cm("default"),
			"commonAnnotations:\n  team: a\nCommonLabels:\n  app: x\nlabels:\n  - pairs:\n      tier: premium\nbuildMetadata: [originAnnotations]\nsortOptions:\n  order: fifo\n", nil},
		{"a patch that gives both one namespace", cm("a"), cm("b"),
			"patches:\n  - target:\n      kind: ConfigMap\n      name: clash\n    patch: |-\n      - op: replace\n        path: /metadata/namespace\n        value: same\n", nil},
		{"labels whose fields give both one name", secret("a", ""), secret("z", ""), renameFields("name", "same"), nil},
		{"labels whose fields give both one namespace", secret("clash", "a"), secret("clash", "b"), renameFields("namespace", "same"), nil},
		{"a folder's configurations point the tier's commonLabels at names", secret("a", ""), secret("z", ""), "commonLabels:\n  name: same\n", upward},
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
			if tt.extra != nil {
				for name, content := range tt.extra {
					m[dir+"/extra/"+name] = &fstest.MapFile{Data: []byte(content)}
				}
				m[kpath].Data = append(m[kpath].Data, "\n  - extra"...)
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
			if err == nil || !strings.Contains(err.Error(), "already registered id") {
				t.Fatalf("CheckDirs = %v, want the clash kustomize refuses", err)
			}
		})
	}
}

// TestCheckOfOtherPathsOnOneTree: a large tree's check judges the changed
// paths it is given; on the same tree, a check of other paths is not
// answered with the verdict of the first (the batch's refusal must not
// fall on whichever message's check comes next on that tree).
func TestCheckOfOtherPathsOnOneTree(t *testing.T) {
	m := large(t, 100)
	dir := root + "/tenants/premium"
	kpath := dir + "/kustomization.yaml"
	for _, f := range []string{"aa", "zz"} {
		m[dir+"/"+f+".yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: clash\n  namespace: " + f + "\n")}
		m[kpath].Data = append(m[kpath].Data, "\n  - "+f+".yaml"...)
	}
	// A patch gives both one namespace: kustomize refuses them together.
	m[kpath].Data = append(m[kpath].Data, "\npatches:\n  - target:\n      kind: ConfigMap\n      name: clash\n    patch: |-\n      - op: replace\n        path: /metadata/namespace\n        value: same\n"...)
	src := hashedFS{indexFS{gitops.FS{FS: m}, m}}
	c := NewChecker(gitops.Layout{Root: root})
	if err := c.CheckDirs(src, []string{dir + "/aa.yaml", dir + "/zz.yaml", kpath}); err == nil {
		t.Fatal("both clashing files changed: accepted")
	}
	one := []string{dir + "/seed-7.yaml"}
	got, fresh := c.CheckDirs(src, one), NewChecker(gitops.Layout{Root: root}).CheckDirs(src, one)
	if (got == nil) != (fresh == nil) {
		t.Fatalf("seed-7 alone on the same tree: %v, a fresh check: %v", got, fresh)
	}
}

// hashedFS is an indexFS that names a folder's content by a hash, as a git
// snapshot does, so that the Checker keeps its verdicts.
type hashedFS struct{ indexFS }

func (x hashedFS) DirHash(dir string) (string, error) {
	h := sha1.New()
	for _, name := range slices.Sorted(maps.Keys(x.m)) {
		if strings.HasPrefix(name, dir+"/") {
			fmt.Fprintf(h, "%s\x00%s\x00", name, x.m[name].Data)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TestLargeTreeIdsAsKustomizeReadsThem: what kustomize builds, the check
// of a large tree accepts: tenants whose names YAML 1.1 reads as booleans
// or numbers (valid tenant ids), an empty item of a list, and resources
// that a folder's namePrefix keeps apart although their effective
// namespaces are one.
func TestLargeTreeIdsAsKustomizeReadsThem(t *testing.T) {
	t.Run("names that are not strings in YAML 1.1", func(t *testing.T) {
		m := large(t, 100)
		dir := root + "/tenants/premium"
		kpath := dir + "/kustomization.yaml"
		changed := []string{kpath}
		for _, id := range []string{"yes", "on", "no", "y", "123", "1e3"} {
			m[dir+"/"+id+".yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", id))}
			m[kpath].Data = append(m[kpath].Data, "\n  - "+id+".yaml"...)
			changed = append(changed, dir+"/"+id+".yaml")
		}
		m[dir+"/list.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMapList\nitems:\n  - {}\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: listed\n")}
		m[kpath].Data = append(m[kpath].Data, "\n  - list.yaml"...)
		changed = append(changed, dir+"/list.yaml")
		src := indexFS{gitops.FS{FS: m}, m}
		if err := Build(src, root+"/tenants"); err != nil {
			t.Fatalf("setup: kustomize refuses the tree: %v", err)
		}
		if err := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, changed); err != nil {
			t.Fatalf("CheckDirs: %v", err)
		}
	})
	t.Run("a prefix keeps apart no namespace and default", func(t *testing.T) {
		m := large(t, 100)
		basic := root + "/tenants/basic/kustomization.yaml"
		m[root+"/tenants/basic/settings.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n")}
		m[basic].Data = append(m[basic].Data, "\n  - settings.yaml\nnamePrefix: basic-\n"...)
		dir := root + "/tenants/premium"
		kpath := dir + "/kustomization.yaml"
		m[dir+"/settings.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\n")}
		m[kpath].Data = append(m[kpath].Data, "\n  - settings.yaml"...)
		src := indexFS{gitops.FS{FS: m}, m}
		if err := Build(src, root+"/tenants"); err != nil {
			t.Fatalf("setup: kustomize refuses the tree: %v", err)
		}
		if err := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, []string{dir + "/settings.yaml", kpath}); err != nil {
			t.Fatalf("CheckDirs: %v", err)
		}
	})
}

// TestOnlyResources: the fields that leave ids as written keep a tree's
// change in parts, in any case kustomize reads them in; anything else, or
// a kustomization that does not read, sends it to one build.
func TestOnlyResources(t *testing.T) {
	tests := []struct {
		rest string
		want bool
	}{
		{"", true},
		{"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nmetadata:\n  name: x\n", true},
		{"commonAnnotations:\n  a: b\ncommonLabels:\n  c: d\n", true},
		{"CommonAnnotations:\n  a: b\nLABELS:\n  - pairs: {c: d}\n", true},
		{"sortOptions:\n  order: legacy\nbuildMetadata: [managedByLabel]\n", true},
		{"namespace: x\n", false},
		{"NamePrefix: x-\n", false},
		{"nameSuffix: -x\n", false},
		{"patches:\n  - path: p.yaml\n", false},
		{"replacements: []\n", false},
		{"configMapGenerator:\n  - name: x\n", false},
		{"components: [c]\n", false},
		{"images:\n  - name: x\n", false},
		{"commonAnnotations: [unclosed\n", false},
		{"labels:\n  - pairs: {a: b}\n    includeSelectors: true\n", true},
		{"labels:\n  - pairs: {name: x}\n    fields:\n      - path: metadata\n", false},
		{"labels:\n  - pairs: {name: x}\n    Fields:\n      - path: metadata\n", false},
		{"labels: {a: b}\n", false},
		{"labels:\n  - x\n", false},
	}
	for _, tt := range tests {
		content := "resources:\n  - a.yaml\n" + tt.rest
		if got, _ := readFields([]byte(content)); got != tt.want {
			t.Errorf("readFields(%q): plain %v, want %v", content, got, tt.want)
		}
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
