package intent

import (
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/templates"
)

// migrated applies a layout migration to m and returns the tree after and
// the changed paths.
func migrated(t *testing.T, m fstest.MapFS, shards int) (fstest.MapFS, []string) {
	t.Helper()
	files, err := layout.Migrate(gitops.FS{FS: m}, shards)
	if err != nil {
		t.Fatal(err)
	}
	after := clone(m)
	for p, b := range files {
		if b == nil {
			delete(after, p)
		} else {
			after[p] = &fstest.MapFile{Data: b}
		}
	}
	return after, slices.Sorted(maps.Keys(files))
}

// TestMovedAllowsOnlyMoves: a layout migration passes; the same migration
// with one moved file edited, or one tenant left out of its list, is
// refused with the objects named.
func TestMovedAllowsOnlyMoves(t *testing.T) {
	m := onboarded(t, "p1", "p2", "p3", "b1", "b2")
	put(m, "tenants/premium/stray.yaml", strings.ReplaceAll(mustFile(t, m, "tenants/premium/p1.yaml"), "p1", "stray"))
	after, changed := migrated(t, m, 3)
	if err := NewChecker(layout).Moved(mem{m}, mem{after}, changed); err != nil {
		t.Fatalf("a migration: %v", err)
	}
	sharded, _ := layout.Of(gitops.FS{FS: after})
	p2 := sharded.TenantFile("premium", "p2")
	for name, spoil := range map[string]func(fstest.MapFS){
		"an edited file": func(a fstest.MapFS) {
			a[p2] = &fstest.MapFile{Data: []byte(strings.Replace(string(a[p2].Data), "0.0", "9.9", 1))}
		},
		"a tenant unlisted": func(a fstest.MapFS) {
			k := sharded.TenantDir("premium", "p2") + "/kustomization.yaml"
			a[k] = &fstest.MapFile{Data: []byte(strings.Replace(string(a[k].Data), "  - p2.yaml\n", "", 1))}
		},
	} {
		t.Run(name, func(t *testing.T) {
			a := clone(after)
			spoil(a)
			err := NewChecker(layout).Moved(mem{m}, mem{a}, append(slices.Clone(changed), sharded.TenantDir("premium", "p2")+"/kustomization.yaml"))
			if err == nil || !strings.Contains(err.Error(), "p2") {
				t.Fatalf("got %v, want the objects of p2 named", err)
			}
		})
	}
}

func mustFile(t *testing.T, m fstest.MapFS, name string) string {
	t.Helper()
	f, ok := m[path.Join(templates.Root, name)]
	if !ok {
		t.Fatalf("%s is absent", name)
	}
	return string(f.Data)
}

// TestMovedIntoShardKustomizations: giving shard folders Kustomizations of
// their own moves every tenant's objects out of the tenants folder's build
// into the shard folders'; compared across all of them, nothing changes.
// A file edited in the same change is refused, naming its object.
func TestMovedIntoShardKustomizations(t *testing.T) {
	m := onboarded(t, "p1", "p2", "p3", "b1", "b2")
	sharded, _ := migrated(t, m, 3)
	to := gitops.Layout{Root: templates.Root, Shards: 3, ShardKustomizations: true}
	files, err := layout.MigrateTo(gitops.FS{FS: sharded}, to)
	if err != nil {
		t.Fatal(err)
	}
	after := clone(sharded)
	for p, b := range files {
		if b == nil {
			delete(after, p)
		} else {
			after[p] = &fstest.MapFile{Data: b}
		}
	}
	if k := string(after[to.TierKustomization("premium")].Data); strings.Contains(k, "shard-") {
		t.Fatalf("the tier still lists its shard folders:\n%s", k)
	}
	changed := slices.Sorted(maps.Keys(files))
	if err := NewChecker(layout).Moved(mem{sharded}, mem{after}, changed); err != nil {
		t.Fatalf("into shard Kustomizations: %v", err)
	}
	p2 := to.TenantFile("premium", "p2")
	after[p2] = &fstest.MapFile{Data: []byte(strings.Replace(string(after[p2].Data), "0.0", "9.9", 1))}
	if err := NewChecker(layout).Moved(mem{sharded}, mem{after}, append(changed, p2)); err == nil || !strings.Contains(err.Error(), "p2") {
		t.Fatalf("an edit in the same change: %v, want p2's objects named", err)
	}
}

// TestATierMoveAcrossShardKustomizations: under shard Kustomizations, a
// tenant moved from premium to advanced in one change (the offboarding
// and the onboarding of a move) leaves one shard folder and enters
// another, which has no Kustomization (nor folder) yet. Checked as both
// messages across every folder, it passes: the onboarding adds its
// objects in the new folder, the offboarding removes them from the old.
func TestATierMoveAcrossShardKustomizations(t *testing.T) {
	m := onboarded(t, "p1", "p2", "p3")
	sharded, _ := migrated(t, m, 16)
	to := gitops.Layout{Root: templates.Root, Shards: 16, ShardKustomizations: true}
	files, err := layout.MigrateTo(gitops.FS{FS: sharded}, to)
	if err != nil {
		t.Fatal(err)
	}
	before := clone(sharded)
	for p, b := range files {
		if b == nil {
			delete(before, p)
		} else {
			before[p] = &fstest.MapFile{Data: b}
		}
	}
	if _, err := fs.Stat(before, path.Dir(to.TenantFile("advanced", "p2"))); err == nil {
		t.Fatal("the new shard folder exists already: the test would not test a new one")
	}
	offReq, mid, changed := planned(t, before, message.Offboarding, `{"tenant_id":"p2","tenant_tier":"premium"}`)
	onReq, after, more := planned(t, mid, message.Onboarding, `{"tenant_id":"p2","tenant_tier":"advanced","release_version":"0.0"}`)
	changed = append(changed, more...)
	if err := NewChecker(layout).Check(mem{before}, mem{after}, offReq, changed, onReq); err != nil {
		t.Errorf("the move, checked as both messages: %v", err)
	}
	if err := NewChecker(layout).Check(mem{before}, mem{after}, offReq, changed); err == nil {
		t.Errorf("the move checked as the offboarding alone passed")
	}
}
