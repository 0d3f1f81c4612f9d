package gitrepo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/tenant-worker/tenant-worker/internal/gitobj"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
)

// TestThinPackPushes: a chain of commits editing a large folder is pushed
// as one thin pack with tree deltas, and git on the server checks every
// object and ends with exactly the tree of the last commit.
func TestThinPackPushes(t *testing.T) {
	srv, _ := startServer(t)
	seed := fstest.MapFS{}
	list := seedFolder(seed, "tier", 3000)
	grown := list + "  - tenant-5000.yaml\n"
	shrunk := strings.Replace(grown, "  - tenant-0001.yaml\n", "", 1)
	r := openSeeded(t, srv, "big.git", seed)
	base := r.Head()
	tip := base
	for i, files := range []map[string][]byte{
		{"tier/tenant-5000.yaml": []byte("new\n"), "tier/kustomization.yaml": []byte(grown)},
		{"tier/tenant-0001.yaml": nil, "tier/kustomization.yaml": []byte(shrunk)},
		{"tier/tenant-0002.yaml": []byte("changed\n"), "other/x.yaml": []byte("x\n")},
		{"tier/tenant-5000.yaml": nil, "tier/a-first.yaml": []byte("first\n")},
	} {
		var err error
		if tip, err = r.Commit(tip, files, fmt.Sprintf("change %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, bases, pack := packOf(t, r, base, tip)
	if len(bases) == 0 {
		t.Fatal("no delta bases recorded")
	}
	if len(pack) > 5_000 {
		t.Errorf("pack of four small commits is %d bytes: the 100 KB tree or the 60 KB kustomization was not sent as a delta", len(pack))
	}
	pushChecked(t, srv, "big.git", r, base, tip)
	if got, _ := srv.Output("big.git", "show", "main:tier/tenant-0002.yaml"); got != "changed\n" {
		t.Errorf("tenant-0002 = %q", got)
	}
	if got, _ := srv.Output("big.git", "show", "main:tier/kustomization.yaml"); got != shrunk {
		t.Errorf("kustomization.yaml has %d bytes on the server, want %d", len(got), len(shrunk))
	}
}

// TestThinDeltasOnlyForLargeObjects: a commit that changes a large folder
// and a small one sends the large folder's tree and list as deltas against
// the versions the server holds, and the small folder's whole (a base the
// server must read back costs it more than a few KB sent), and the server
// ends with the commit's tree.
func TestThinDeltasOnlyForLargeObjects(t *testing.T) {
	srv, _ := startServer(t)
	seed := fstest.MapFS{}
	big, small := seedFolder(seed, "big", 3000), seedFolder(seed, "small", 20)
	r := openSeeded(t, srv, "mixed.git", seed)
	base := r.Head()
	tip, err := r.Commit(base, map[string][]byte{
		"big/tenant-5000.yaml":     []byte("new\n"),
		"big/kustomization.yaml":   []byte(big + "  - tenant-5000.yaml\n"),
		"small/tenant-5000.yaml":   []byte("new\n"),
		"small/kustomization.yaml": []byte(small + "  - tenant-5000.yaml\n"),
	}, "one of each")
	if err != nil {
		t.Fatal(err)
	}
	hashes, bases, pack := packOf(t, r, base, tip)
	sizes := map[plumbing.Hash]int{} // by its base: the size of each object that has one
	for _, h := range hashes {
		if _, ok := bases[h]; !ok {
			continue
		}
		obj, err := r.repo.Storer.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			t.Fatal(err)
		}
		sizes[bases[h]] = int(obj.Size())
	}
	var deltas, under int
	for _, b := range deltaBases(t, pack) {
		deltas++
		if sizes[b] < gitobj.ThinMin {
			under++
		}
	}
	if deltas != 2 || under != 0 {
		t.Errorf("%d objects sent as thin deltas, %d of them under %d bytes; want the big folder's tree and list (2) and nothing small", deltas, under, gitobj.ThinMin)
	}
	pushChecked(t, srv, "mixed.git", r, base, tip)
}

// pushChecked pushes base..tip of r to the repository name on srv and
// checks that git on the server finds every object sound and main's tree
// is tip's.
func pushChecked(t *testing.T, srv *gitserver.Server, name string, r *Repo, base, tip plumbing.Hash) {
	t.Helper()
	if err := r.Push(context.Background(), base, tip); err != nil {
		t.Fatal(err)
	}
	if out, err := srv.Output(name, "fsck", "--strict", "--no-dangling"); err != nil {
		t.Fatalf("fsck: %v %s", err, out)
	}
	remote, err := srv.Output(name, "rev-parse", "main^{tree}")
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.repo.CommitObject(tip)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(remote) != c.TreeHash.String() {
		t.Errorf("remote tree %s, want %s", remote, c.TreeHash)
	}
}

// seedFolder adds n tenant files and their kustomization to seed in the
// folder dir, and returns the kustomization.
func seedFolder(seed fstest.MapFS, dir string, n int) string {
	var list strings.Builder
	list.WriteString("resources:\n")
	for i := range n {
		seed[fmt.Sprintf("%s/tenant-%04d.yaml", dir, i)] = &fstest.MapFile{Data: []byte(fmt.Sprintf("id: %d\n", i))}
		fmt.Fprintf(&list, "  - tenant-%04d.yaml\n", i)
	}
	seed[dir+"/kustomization.yaml"] = &fstest.MapFile{Data: []byte(list.String())}
	return list.String()
}

// openSeeded creates the repository name on srv with the files of seed and
// opens it in memory.
func openSeeded(t *testing.T, srv *gitserver.Server, name string, seed fstest.MapFS) *Repo {
	t.Helper()
	url, err := srv.CreateRepo(name, "main", seed)
	if err != nil {
		t.Fatal(err)
	}
	// Every pack through index-pack, as a batch's is (git unpacks packs of
	// fewer than 100 objects with unpack-objects, which resolves more).
	if out, err := srv.Output(name, "config", "receive.unpackLimit", "1"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	r, err := open(t, url, "", token)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// deltaBases lists the base of each delta in pack, in order.
func deltaBases(t *testing.T, pack []byte) []plumbing.Hash {
	t.Helper()
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, n, err := sc.Header()
	if err != nil {
		t.Fatal(err)
	}
	var bases []plumbing.Hash
	for range n {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			t.Fatal(err)
		}
		if oh.Type == plumbing.REFDeltaObject {
			bases = append(bases, oh.Reference)
		}
		if _, _, err := sc.NextObject(io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	return bases
}

// TestChangesThatComeBackInOnePush: a batch whose folder comes back to a
// version it had earlier in the same push (a tenant onboarded and
// offboarded, a change and its revert) pushes a pack the server's
// index-pack resolves: no two objects are deltas of each other. A small
// folder changed twice still sends its second version as a delta against
// the first, which is in the pack, and a large one sends each version as
// a delta against the one before it.
func TestChangesThatComeBackInOnePush(t *testing.T) {
	for _, c := range []struct {
		name    string
		tenants int
		changes func(list string) []map[string][]byte
		maxPack int // bytes, when set: the large folder's versions went as deltas
	}{
		{"onboard two, offboard the second", 20, comeBack, 0},
		{"onboard two, offboard the second, large folder", 3000, comeBack, 5_000},
		{"a change and its revert", 3000, func(list string) []map[string][]byte {
			return []map[string][]byte{
				{"tier/kustomization.yaml": []byte(list + "  - extra.yaml\n")},
				{"tier/kustomization.yaml": []byte(list)},
			}
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := startServer(t)
			seed := fstest.MapFS{}
			list := seedFolder(seed, "tier", c.tenants)
			r := openSeeded(t, srv, "back.git", seed)
			base := r.Head()
			tip := base
			for i, files := range c.changes(list) {
				var err error
				if tip, err = r.Commit(tip, files, fmt.Sprintf("change %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			hashes, _, pack := packOf(t, r, base, tip)
			if c.maxPack > 0 && len(pack) > c.maxPack {
				t.Errorf("pack of %d bytes, want at most %d: a version of the large folder went whole", len(pack), c.maxPack)
			}
			sent := deltaBases(t, pack)
			if c.tenants < 100 {
				inPack := 0
				for _, b := range sent {
					if slices.Contains(hashes, b) {
						inPack++
					}
				}
				if inPack < 2 {
					t.Errorf("%d deltas against objects of the pack; want at least the second version of the folder's tree and list against the first", inPack)
				}
			}
			pushChecked(t, srv, "back.git", r, base, tip)
		})
	}
}

// comeBack onboards t1 and t2 to the folder listed by list, then offboards
// t2: the third list is the first again.
func comeBack(list string) []map[string][]byte {
	return []map[string][]byte{
		{"tier/t1.yaml": []byte("t1\n"), "tier/kustomization.yaml": []byte(list + "  - t1.yaml\n")},
		{"tier/t2.yaml": []byte("t2\n"), "tier/kustomization.yaml": []byte(list + "  - t1.yaml\n  - t2.yaml\n")},
		{"tier/t2.yaml": nil, "tier/kustomization.yaml": []byte(list + "  - t1.yaml\n")},
	}
}

// packOf is the pack a push of base..tip sends: its objects, their delta
// bases and the pack's bytes.
func packOf(t *testing.T, r *Repo, base, tip plumbing.Hash) ([]plumbing.Hash, map[plumbing.Hash]plumbing.Hash, []byte) {
	t.Helper()
	hashes, bases, ok := r.newObjects(base, tip)
	if !ok {
		t.Fatal("the commits' objects were not recorded")
	}
	var pack bytes.Buffer
	if err := gitobj.WritePack(&pack, r.repo.Storer, hashes, bases); err != nil {
		t.Fatal(err)
	}
	return hashes, bases, pack.Bytes()
}
