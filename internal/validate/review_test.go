package validate

import (
	"fmt"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
)

// reviewShardedWithLoneLeftover is a premium tier large enough for the
// pruned build, plus a leftover file nobody lists, migrated to 100 shard
// folders: the leftover's shard folder holds nothing else, so the
// migration gives it the kustomization "resources: []" (which kustomize
// builds). It returns the tree before the migration, the migration's
// files, and the sharded layout.
func reviewShardedWithLoneLeftover(t *testing.T) (fstest.MapFS, map[string][]byte, gitops.Layout) {
	t.Helper()
	m := seed(t)
	l := gitops.Layout{Root: root}
	k := l.TierKustomization("premium")
	data := string(m[k].Data)
	for i := 0; i < fullBuildLimit+10; i++ {
		id := fmt.Sprintf("seed-%d", i)
		m[l.TierDir("premium")+"/"+id+".yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", id))}
		data += "\n  - " + id + ".yaml"
	}
	m[k].Data = []byte(data)
	m[l.TierDir("premium")+"/stray.yaml"] = &fstest.MapFile{Data: []byte(tenant(t, m, "premium", "stray"))}
	files, err := l.Migrate(gitops.FS{FS: m}, 100)
	if err != nil {
		t.Fatal(err)
	}
	l.Shards = 100
	return m, files, l
}

func reviewApply(m fstest.MapFS, files map[string][]byte) []string {
	var changed []string
	for p, c := range files {
		changed = append(changed, p)
		if c == nil {
			delete(m, p)
		} else {
			m[p] = &fstest.MapFile{Data: c}
		}
	}
	slices.Sort(changed)
	return changed
}

// TestReviewPrunedBuildKeepsAnEmptyShardList: the pruned kustomize build
// turns a changed shard folder whose kustomization lists nothing
// ("resources: []", as the migration writes it for a shard that only
// gets unlisted files) into an empty kustomization.yaml, which kustomize
// refuses. The full build of the same tree passes, so validation refuses
// (1) the migration commit itself on any tier of more than 64 files, and
// (2) later, the offboarding of the unlisted tenant in that shard.
func TestReviewPrunedBuildKeepsAnEmptyShardList(t *testing.T) {
	t.Run("the migration", func(t *testing.T) {
		m, files, l := reviewShardedWithLoneLeftover(t)
		changed := reviewApply(m, files)
		src := indexFS{gitops.FS{FS: m}, m}
		if err := Build(src, l.TenantsDir()); err != nil {
			t.Fatalf("setup: kustomize refuses the whole tree too: %v", err)
		}
		if err := NewChecker(gitops.Layout{Root: root}).Check(src, changed); err != nil {
			t.Errorf("kustomize builds the migrated tree, the check refuses it: %v", err)
		}
	})
	t.Run("offboarding the unlisted tenant", func(t *testing.T) {
		m, files, l := reviewShardedWithLoneLeftover(t)
		reviewApply(m, files)
		c, err := l.Plan(gitops.FS{FS: m}, message.Request{Kind: message.Offboarding, TenantID: "stray", Tier: "premium"})
		if err != nil {
			t.Fatal(err)
		}
		changed := reviewApply(m, c.Files)
		src := indexFS{gitops.FS{FS: m}, m}
		if err := Build(src, l.TenantsDir()); err != nil {
			t.Fatalf("setup: kustomize refuses the whole tree too: %v", err)
		}
		if err := NewChecker(gitops.Layout{Root: root}).CheckDirs(src, changed); err != nil {
			t.Errorf("kustomize builds the tree after offboarding %v, the check refuses it: %v", changed, err)
		}
	})
}
