package gitobj

// Round trips against git itself: what the codec writes (objects, whole
// packs, thin packs) is read back by the git command line (index-pack
// --strict, cat-file, ls-tree, fsck --strict in a bare repository made by
// git init --bare), and what git writes (a pack of a worktree's commit) is
// decoded by the codec, which then builds the same trees git builds for
// the same change.

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// emptyTree is the hash git gives the tree with no entries.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// gitCmd runs git in dir (a repository, or "" for none) with stdin, with no
// configuration but its own, and returns its output.
func gitCmd(dir string, stdin []byte, args ...string) ([]byte, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=codec", "GIT_AUTHOR_EMAIL=codec@example.com",
		"GIT_COMMITTER_NAME=codec", "GIT_COMMITTER_EMAIL=codec@example.com",
		"GIT_AUTHOR_DATE=2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2024-01-01T00:00:00Z")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// git is gitCmd that fails the test on an error, and returns the output
// as text.
func git(t testing.TB, dir string, stdin []byte, args ...string) string {
	t.Helper()
	out, err := gitCmd(dir, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// bareRepo is a new bare repository, made by git init --bare.
func bareRepo(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("these tests check the codec against git itself: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "repo.git")
	git(t, "", nil, "init", "--bare", "-q", dir)
	return dir
}

// indexPack gives pack to git index-pack --stdin in the repository dir,
// with flags (such as --strict, which checks every object as fsck --strict
// does, and --fix-thin, which completes a thin pack with the delta bases
// dir holds, as receive-pack does).
func indexPack(dir string, pack []byte, flags ...string) error {
	_, err := gitCmd(dir, pack, append([]string{"index-pack", "--stdin"}, flags...)...)
	return err
}

// commitMain makes a commit of tree the branch main of dir (with parent,
// when not zero), so that fsck checks what it reaches, and returns it.
func commitMain(t testing.TB, dir string, tree, parent plumbing.Hash) plumbing.Hash {
	t.Helper()
	args := []string{"commit-tree", tree.String(), "-m", "codec"}
	if !parent.IsZero() {
		args = append(args, "-p", parent.String())
	}
	c := plumbing.NewHash(strings.TrimSpace(git(t, dir, nil, args...)))
	git(t, dir, nil, "update-ref", "refs/heads/main", c.String())
	return c
}

// fsck runs git fsck --strict on dir, every object and every link from
// main checked.
func fsck(t testing.TB, dir string) {
	t.Helper()
	git(t, dir, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
}

// gitListing is git ls-tree -r -t of tree in dir: one line per entry,
// trees before what they hold, as "mode type hash\tpath".
func gitListing(t testing.TB, dir string, tree plumbing.Hash) []string {
	t.Helper()
	out := git(t, dir, nil, "ls-tree", "-r", "-t", "-z", tree.String())
	return strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
}

// codecListing is what the codec reads of tree in s, in gitListing's
// form: modes as git canonicalizes them.
func codecListing(t testing.TB, s storer.EncodedObjectStorer, tree plumbing.Hash) []string {
	t.Helper()
	cache := NewTreeCache(4)
	var out []string
	var walk func(h plumbing.Hash, prefix string)
	walk = func(h plumbing.Hash, prefix string) {
		tr, err := cache.Get(s, h)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tr.Len() {
			e := tr.At(i)
			typ := "blob"
			switch e.Kind() {
			case filemode.Dir:
				typ = "tree"
			case filemode.Submodule:
				typ = "commit"
			}
			out = append(out, fmt.Sprintf("%06o %s %s\t%s%s", uint32(e.Kind()), typ, e.Hash, prefix, e.Name))
			if e.IsDir() {
				walk(e.Hash, prefix+e.Name+"/")
			}
		}
	}
	walk(tree, "")
	if out == nil {
		out = []string{""} // as gitListing splits an empty listing
	}
	return out
}

// catFile reads the contents of revs (such as "main:a/b.yaml") with git
// cat-file --batch, in one call.
func catFile(t testing.TB, dir string, revs []string) map[string][]byte {
	t.Helper()
	out := []byte(git(t, dir, []byte(strings.Join(revs, "\n")+"\n"), "cat-file", "--batch"))
	got := map[string][]byte{}
	for _, rev := range revs {
		line, rest, ok := bytes.Cut(out, []byte("\n"))
		var h string
		var typ string
		var size int
		if _, err := fmt.Sscanf(string(line), "%s %s %d", &h, &typ, &size); !ok || err != nil || len(rest) < size+1 {
			t.Fatalf("cat-file %s: %q", rev, line)
		}
		got[rev], out = rest[:size], rest[size+1:]
	}
	return got
}

// packAll is the pack WritePack makes of hashes with no delta bases.
func packAll(t testing.TB, s storer.EncodedObjectStorer, hashes []plumbing.Hash) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WritePack(&b, s, hashes, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// randomBytes is n bytes that do not compress, the same for a seed.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

// want is an entry a test expects git to list: its mode and, for a file,
// its content.
type want struct {
	mode    filemode.FileMode
	content []byte
}

// apply is the model of WriteTree a test checks git's listing against:
// files written keep an executable mode, others are regular; nil deletes.
func apply(tree map[string]want, files map[string][]byte) {
	for p, c := range files {
		if c == nil {
			delete(tree, p)
			continue
		}
		mode := filemode.Regular
		if tree[p].mode == filemode.Executable {
			mode = filemode.Executable
		}
		tree[p] = want{mode, c}
	}
}

// TestCodecObjectsReadByGit: trees and blobs the codec writes (from
// nothing or on a tree it encoded by hand), sent to git as a pack, are
// accepted by index-pack --strict and fsck --strict, keep the hashes the
// codec gave them, and read back through git as the files they were made
// from, with their modes.
func TestCodecObjectsReadByGit(t *testing.T) {
	many := map[string][]byte{}
	for i := range 3000 {
		many[fmt.Sprintf("tier/tenant-%04d.yaml", i)] = fmt.Appendf(nil, "id: %d\n", i)
	}
	// Names whose order differs between a file and a directory of the
	// same name: git sorts a directory as if it ended in "/".
	for _, n := range []string{"foo-bar", "foo.txt", "foo/x", "foo0", "foo/y/z", "a", "a.b/c", "a0"} {
		many["tier/"+n] = []byte(n + "\n")
	}
	big := randomBytes(1, 3<<20)
	for _, c := range []struct {
		name string
		// base writes a starting tree by hand and says what git must list
		// of it (files only); nil: none.
		base    func(t *testing.T, s storer.EncodedObjectStorer) (plumbing.Hash, map[string]want)
		changes []map[string][]byte // applied in turn by WriteTree
	}{
		{name: "empty tree", base: func(t *testing.T, s storer.EncodedObjectStorer) (plumbing.Hash, map[string]want) {
			raw, err := EncodeTree(nil)
			if err != nil {
				t.Fatal(err)
			}
			h, err := WriteObject(s, plumbing.TreeObject, raw)
			if err != nil || h.String() != emptyTree {
				t.Fatalf("the empty tree: %s %v, want %s", h, err, emptyTree)
			}
			return h, map[string]want{}
		}},
		{name: "nested trees", changes: []map[string][]byte{
			{"top.yaml": []byte("top\n"), "a/b/c/d/e.yaml": []byte("deep\n"), "a/b/f.yaml": []byte("f\n"), "x/y.yaml": []byte("y\n")},
			{"a/b/c/d/e.yaml": nil, "a/b/c/g.yaml": []byte("g\n"), "x/y.yaml": nil, "x/z/w.yaml": []byte("w\n")},
		}},
		{name: "a folder emptied goes", changes: []map[string][]byte{
			{"keep.yaml": []byte("k\n"), "gone/only.yaml": []byte("o\n")},
			{"gone/only.yaml": nil},
		}},
		{name: "file modes", base: func(t *testing.T, s storer.EncodedObjectStorer) (plumbing.Hash, map[string]want) {
			blob := func(c string) plumbing.Hash {
				h, err := WriteBlob(s, []byte(c))
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			sub, err := EncodeTree([]TreeEntry{{Name: "inner.yaml", Mode: filemode.Regular, Hash: blob("inner\n")}})
			if err != nil {
				t.Fatal(err)
			}
			subHash, err := WriteObject(s, plumbing.TreeObject, sub)
			if err != nil {
				t.Fatal(err)
			}
			entries := []TreeEntry{
				{Name: "run.sh", Mode: filemode.Executable, Hash: blob("#!/bin/sh\n")},
				{Name: "link", Mode: filemode.Symlink, Hash: blob("run.sh")},
				{Name: "module", Mode: filemode.Submodule, Hash: plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")},
				{Name: "plain.yaml", Mode: filemode.Regular, Hash: blob("plain\n")},
				{Name: "sub", Mode: filemode.Dir, Hash: subHash},
			}
			slices.SortFunc(entries, CompareEntries)
			raw, err := EncodeTree(entries)
			if err != nil {
				t.Fatal(err)
			}
			h, err := WriteObject(s, plumbing.TreeObject, raw)
			if err != nil {
				t.Fatal(err)
			}
			return h, map[string]want{
				"run.sh":         {filemode.Executable, []byte("#!/bin/sh\n")},
				"link":           {filemode.Symlink, []byte("run.sh")},
				"module":         {filemode.Submodule, nil},
				"plain.yaml":     {filemode.Regular, []byte("plain\n")},
				"sub/inner.yaml": {filemode.Regular, []byte("inner\n")},
			}
		}, changes: []map[string][]byte{
			// An executable edited stays one, a new file is regular, the
			// symlink and the submodule are left as they are.
			{"run.sh": []byte("#!/bin/sh\necho\n"), "sub/new.yaml": []byte("new\n"), "plain.yaml": []byte("edited\n")},
		}},
		{name: "large blobs", changes: []map[string][]byte{
			{"big/random.bin": big, "big/text.yaml": bytes.Repeat([]byte("  - tenant.yaml\n"), 1<<16), "small": []byte("s\n")},
			{"big/random.bin": append(slices.Clone(big[:1<<20]), big[1<<20+7:]...)},
		}},
		{name: "many entries", changes: []map[string][]byte{
			many,
			{"tier/tenant-0000.yaml": nil, "tier/tenant-1500.yaml": []byte("edited\n"), "tier/foo/y/z": nil, "tier/foo.d/n": []byte("n\n")},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memory.NewStorage()
			cache := NewTreeCache(16)
			tree := plumbing.ZeroHash
			model := map[string]want{}
			var hashes []plumbing.Hash // everything the codec wrote
			if c.base != nil {
				tree, model = c.base(t, s)
				for h := range s.Objects {
					hashes = append(hashes, h)
				}
			}
			for _, files := range c.changes {
				var log ObjectLog
				var err error
				if tree, err = WriteTree(s, cache, tree, files, &log); err != nil {
					t.Fatal(err)
				}
				hashes = append(hashes, log.Hashes...)
				apply(model, files)
			}
			dir := bareRepo(t)
			if err := indexPack(dir, packAll(t, s, hashes), "--strict"); err != nil {
				t.Fatal(err)
			}
			commitMain(t, dir, tree, plumbing.ZeroHash)
			fsck(t, dir)

			// git holds every object under the hash the codec gave it.
			var check bytes.Buffer
			for _, h := range hashes {
				fmt.Fprintln(&check, h)
			}
			if out := git(t, dir, check.Bytes(), "cat-file", "--batch-check"); strings.Contains(out, "missing") {
				t.Fatalf("objects missing from git:\n%s", out)
			}
			// git lists what was written, modes included, and reads the
			// files' contents back.
			var listed []string
			for _, line := range gitListing(t, dir, tree) {
				if meta, p, ok := strings.Cut(line, "\t"); ok && !strings.Contains(meta, " tree ") {
					listed = append(listed, fmt.Sprintf("%s %s", p, meta[:6]))
				}
			}
			var wantListed, revs []string
			for _, p := range slices.Sorted(maps.Keys(model)) {
				wantListed = append(wantListed, fmt.Sprintf("%s %06o", p, uint32(model[p].mode)))
				if model[p].mode != filemode.Submodule {
					revs = append(revs, "main:"+p)
				}
			}
			slices.Sort(listed)
			if !slices.Equal(listed, wantListed) {
				t.Fatalf("git lists\n%s\nwant\n%s", strings.Join(listed, "\n"), strings.Join(wantListed, "\n"))
			}
			if len(revs) > 0 {
				for rev, got := range catFile(t, dir, revs) {
					if w := model[strings.TrimPrefix(rev, "main:")].content; !bytes.Equal(got, w) {
						t.Errorf("%s: git reads %d bytes, want %d", rev, len(got), len(w))
					}
				}
			}
			if got := git(t, dir, nil, "cat-file", "-t", tree.String()); got != "tree\n" {
				t.Errorf("git reads the root as a %q", got)
			}
			// And the codec lists the tree as git does.
			if got, w := codecListing(t, s, tree), gitListing(t, dir, tree); !slices.Equal(got, w) {
				t.Errorf("the codec lists\n%s\ngit lists\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
		})
	}
}

// worktreeFile is a file a test writes in a git worktree.
type worktreeFile struct {
	content string
	mode    os.FileMode // 0: 0644; os.ModeSymlink: a link to content
}

// writeWorktree writes files in the worktree dir (nil: delete).
func writeWorktree(t testing.TB, dir string, files map[string]*worktreeFile) {
	t.Helper()
	for p, f := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if f == nil {
			if err := os.Remove(full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case f.mode == os.ModeSymlink:
			if err := os.Symlink(f.content, full); err != nil {
				t.Fatal(err)
			}
		default:
			mode := f.mode
			if mode == 0 {
				mode = 0o644
			}
			if err := os.WriteFile(full, []byte(f.content), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestGitObjectsDecodedByCodec: a tree git writes (from a worktree, sent
// as the pack git pack-objects makes, deltas included, and stored as a
// clone stores it) is decoded by the codec entry for entry as git lists
// it, its files read back as written; a change the codec then makes on it
// gives the very tree git makes for the same change in the worktree (the
// same hash: the same bytes).
func TestGitObjectsDecodedByCodec(t *testing.T) {
	many := map[string]*worktreeFile{}
	for i := range 1000 {
		many[fmt.Sprintf("tier/tenant-%04d.yaml", i)] = &worktreeFile{content: fmt.Sprintf("id: %d\n", i)}
	}
	for _, n := range []string{"foo-bar", "foo.txt", "foo/x", "foo0", "a", "a.b/c", "a0"} {
		many["tier/"+n] = &worktreeFile{content: n + "\n"}
	}
	big := string(randomBytes(2, 2<<20))
	for _, c := range []struct {
		name   string
		files  map[string]*worktreeFile
		change map[string][]byte // nil deletes
	}{
		{name: "empty tree", change: map[string][]byte{"first/file.yaml": []byte("first\n")}},
		{name: "nested trees", files: map[string]*worktreeFile{
			"a/b/c/d.yaml": {content: "d\n"}, "a/b/e.yaml": {content: "e\n"}, "a/f.yaml": {content: "f\n"}, "top": {content: ""},
		}, change: map[string][]byte{"a/b/c/d.yaml": nil, "a/b/e.yaml": []byte("edited\n"), "a/g/h.yaml": []byte("h\n")}},
		{name: "file modes", files: map[string]*worktreeFile{
			"bin/run.sh": {content: "#!/bin/sh\n", mode: 0o755}, "bin/link": {content: "run.sh", mode: os.ModeSymlink},
			"bin/plain": {content: "plain\n"}, "empty": {content: ""},
		}, change: map[string][]byte{"bin/run.sh": []byte("#!/bin/sh\necho\n"), "bin/new": []byte("new\n"), "empty": []byte("not any more\n")}},
		{name: "large blobs", files: map[string]*worktreeFile{
			"big/random.bin": {content: big}, "big/list.yaml": {content: strings.Repeat("  - tenant.yaml\n", 1<<15)},
		}, change: map[string][]byte{"big/random.bin": []byte(big[:1<<20] + "inserted" + big[1<<20:]), "big/list.yaml": nil}},
		{name: "many entries", files: many, change: map[string][]byte{
			"tier/tenant-0000.yaml": nil, "tier/tenant-0999.yaml": []byte("edited\n"), "tier/foo/x": nil, "tier/foo.d/n": []byte("n\n"), "tier/b": []byte("b\n"),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			work := filepath.Join(t.TempDir(), "work")
			git(t, "", nil, "init", "-q", work)
			writeWorktree(t, work, c.files)
			git(t, work, nil, "add", "-A")
			tree := plumbing.NewHash(strings.TrimSpace(git(t, work, nil, "write-tree")))
			if len(c.files) == 0 && tree.String() != emptyTree {
				t.Fatalf("git's empty tree is %s", tree)
			}
			objects := git(t, work, []byte(tree.String()+"\n"), "rev-list", "--objects", "--stdin")
			var list bytes.Buffer
			for _, line := range strings.Split(strings.TrimSpace(objects), "\n") {
				h, _, _ := strings.Cut(line, " ")
				fmt.Fprintln(&list, h)
			}
			pack, err := gitCmd(work, list.Bytes(), "pack-objects", "--stdout", "-q")
			if err != nil {
				t.Fatal(err)
			}
			s := memory.NewStorage()
			if err := packfile.UpdateObjectStorage(s, bytes.NewReader(pack)); err != nil {
				t.Fatal(err)
			}

			if got, w := codecListing(t, s, tree), gitListing(t, work, tree); !slices.Equal(got, w) {
				t.Fatalf("the codec lists\n%s\ngit lists\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
			cache := NewTreeCache(16)
			for p, f := range c.files {
				blob := blobAt(t, s, cache, tree, p)
				if got, err := ReadBlob(s, blob); err != nil || string(got) != f.content {
					t.Errorf("%s: the codec reads %d bytes (%v), want %d", p, len(got), err, len(f.content))
				}
			}

			var log ObjectLog
			mine, err := WriteTree(s, cache, tree, c.change, &log)
			if err != nil {
				t.Fatal(err)
			}
			change := map[string]*worktreeFile{}
			for p, content := range c.change {
				if content == nil {
					change[p] = nil
					continue
				}
				f := &worktreeFile{content: string(content)}
				if old, ok := c.files[p]; ok {
					f.mode = old.mode // written over, as the codec does: the mode kept
				}
				change[p] = f
			}
			writeWorktree(t, work, change)
			git(t, work, nil, "add", "-A")
			theirs := plumbing.NewHash(strings.TrimSpace(git(t, work, nil, "write-tree")))
			if mine != theirs {
				t.Fatalf("the codec's change gives tree %s, git's %s:\ncodec\n%s\ngit\n%s", mine, theirs,
					strings.Join(codecListing(t, s, mine), "\n"), strings.Join(gitListing(t, work, theirs), "\n"))
			}
		})
	}
}

// blobAt is the hash of the file p of tree, found by the codec.
func blobAt(t testing.TB, s storer.EncodedObjectStorer, cache *TreeCache, tree plumbing.Hash, p string) plumbing.Hash {
	t.Helper()
	parts := strings.Split(p, "/")
	for i, part := range parts {
		tr, err := cache.Get(s, tree)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := tr.Entry(part)
		if !ok || (i < len(parts)-1) != e.IsDir() {
			t.Fatalf("%s: no %s", p, part)
		}
		tree = e.Hash
	}
	return tree
}

// TestModesAsWrittenKept: a tree written by an old git (a zero-padded
// directory mode, a group-writable file mode), stored by git as it is, is
// decoded by the codec, and a change beside those entries leaves them byte
// for byte; git reads the new tree with the entries it had.
func TestModesAsWrittenKept(t *testing.T) {
	dir := bareRepo(t)
	blob := strings.TrimSpace(git(t, dir, []byte("old\n"), "hash-object", "-w", "--stdin"))
	sub := strings.TrimSpace(git(t, dir, []byte("100644 blob "+blob+"\tinner\n"), "mktree"))
	var raw bytes.Buffer
	for _, e := range []struct{ mode, name, hash string }{{"100664", "old.txt", blob}, {"040000", "sub", sub}} {
		h := plumbing.NewHash(e.hash)
		fmt.Fprintf(&raw, "%s %s\x00%s", e.mode, e.name, h[:])
	}
	tree := plumbing.NewHash(strings.TrimSpace(git(t, dir, raw.Bytes(), "hash-object", "-t", "tree", "-w", "--literally", "--stdin")))

	s := memory.NewStorage()
	for _, h := range []string{blob, sub, tree.String()} {
		obj := catFile(t, dir, []string{h})[h]
		typ := plumbing.BlobObject
		if h != blob {
			typ = plumbing.TreeObject
		}
		if got, err := WriteObject(s, typ, string(obj)); err != nil || got.String() != h {
			t.Fatalf("the codec hashes git's %s %s as %s (%v)", typ, h, got, err)
		}
	}
	var log ObjectLog
	mine, err := WriteTree(s, NewTreeCache(4), tree, map[string][]byte{"new.txt": []byte("new\n"), "sub/more": []byte("more\n")}, &log)
	if err != nil {
		t.Fatal(err)
	}
	// Not --strict: git's own checks refuse both modes since git 1.x wrote them.
	if err := indexPack(dir, packAll(t, s, log.Hashes)); err != nil {
		t.Fatal(err)
	}
	got := string(catFile(t, dir, []string{mine.String()})[mine.String()])
	for _, kept := range []string{"100664 old.txt\x00", "040000 sub\x00"} {
		if !strings.Contains(got, kept) {
			t.Errorf("the new tree lost %q: %q", kept, got)
		}
	}
	listing := gitListing(t, dir, mine)
	if got := codecListing(t, s, mine); !slices.Equal(got, listing) {
		t.Errorf("the codec lists\n%s\ngit lists\n%s", strings.Join(got, "\n"), strings.Join(listing, "\n"))
	}
	var paths []string
	for _, line := range listing {
		_, p, _ := strings.Cut(line, "\t")
		paths = append(paths, p)
	}
	if w := []string{"new.txt", "old.txt", "sub", "sub/inner", "sub/more"}; !slices.Equal(paths, w) {
		t.Errorf("git lists %v, want %v", paths, w)
	}
}

// TestThinPacksIndexedByGit: a thin pack the codec writes for a change on
// a tree the receiver holds names those of its delta bases the pack lacks
// by hash; git index-pack refuses it alone (it is thin) and takes it with
// --fix-thin --strict, as receive-pack does, and the receiver ends with
// the codec's tree, fsck --strict clean. Deltas against the receiver's
// objects are made only from ThinMin bytes; against an earlier object of
// the pack, at any size.
func TestThinPacksIndexedByGit(t *testing.T) {
	seed := map[string][]byte{}
	var list strings.Builder
	list.WriteString("resources:\n")
	for i := range 3000 {
		seed[fmt.Sprintf("big/tenant-%04d.yaml", i)] = fmt.Appendf(nil, "id: %d\n", i)
		fmt.Fprintf(&list, "  - tenant-%04d.yaml\n", i)
	}
	seed["big/kustomization.yaml"] = []byte(list.String())
	for i := range 10 {
		seed[fmt.Sprintf("small/tenant-%d.yaml", i)] = fmt.Appendf(nil, "id: %d\n", i)
	}
	grown := list.String() + "  - tenant-5000.yaml\n"
	for _, c := range []struct {
		name    string
		changes []map[string][]byte // commits in turn, all in one pack
		thin    int                 // deltas against the receiver's objects
		inPack  int                 // at least this many deltas against objects of the pack
		maxPack int                 // bytes
	}{
		{"a large folder gains a file", []map[string][]byte{
			{"big/tenant-5000.yaml": []byte("new\n"), "big/kustomization.yaml": []byte(grown)},
		}, 2, 0, 2_000}, // big/ and its list; the root is small
		{"a large file edited in the middle", []map[string][]byte{
			{"big/kustomization.yaml": []byte(strings.Replace(list.String(), "tenant-1500", "tenant-x", 1))},
		}, 2, 0, 2_000},
		{"only a small folder changes: sent whole", []map[string][]byte{
			{"small/tenant-3.yaml": []byte("edited\n")},
		}, 0, 0, 3_000},
		{"versions in one pack, the last back to the first", []map[string][]byte{
			{"big/tenant-5000.yaml": []byte("new\n"), "big/kustomization.yaml": []byte(grown), "small/x": []byte("x\n")},
			{"big/tenant-5001.yaml": []byte("new\n"), "big/kustomization.yaml": []byte(grown + "  - tenant-5001.yaml\n"), "small/y": []byte("y\n")},
			{"big/tenant-5001.yaml": nil, "big/kustomization.yaml": []byte(grown), "small/y": nil},
		}, 2, 3, 6_000}, // the second versions of big/, its list and small/ against the first
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memory.NewStorage()
			cache := NewTreeCache(16)
			var seedLog ObjectLog
			base, err := WriteTree(s, cache, plumbing.ZeroHash, seed, &seedLog)
			if err != nil {
				t.Fatal(err)
			}
			dir := bareRepo(t)
			if err := indexPack(dir, packAll(t, s, seedLog.Hashes), "--strict"); err != nil {
				t.Fatal(err)
			}
			baseCommit := commitMain(t, dir, base, plumbing.ZeroHash)

			// The commits' objects in order, each with the version it
			// replaces, the first commit naming it (as a push collects them).
			tip := base
			var hashes []plumbing.Hash
			bases := map[plumbing.Hash]plumbing.Hash{}
			for _, files := range c.changes {
				var log ObjectLog
				if tip, err = WriteTree(s, cache, tip, files, &log); err != nil {
					t.Fatal(err)
				}
				hashes = append(hashes, log.Hashes...)
				for h, b := range log.Bases {
					if _, ok := bases[h]; !ok {
						bases[h] = b
					}
				}
			}
			var pack bytes.Buffer
			if err := WritePack(&pack, s, hashes, bases); err != nil {
				t.Fatal(err)
			}
			inPack := map[plumbing.Hash]bool{}
			for _, h := range hashes {
				inPack[h] = true
			}
			var thin, within int
			for _, b := range packDeltaBases(t, pack.Bytes()) {
				if inPack[b] {
					within++
					continue
				}
				thin++
				obj, err := s.EncodedObject(plumbing.AnyObject, b)
				if err != nil {
					t.Fatal(err)
				}
				if obj.Size() < ThinMin {
					t.Errorf("a thin delta against %s, of %d bytes: under ThinMin", b, obj.Size())
				}
				if _, err := gitCmd(dir, nil, "cat-file", "-e", b.String()); err != nil {
					t.Errorf("a thin delta against %s, which the receiver lacks", b)
				}
			}
			if thin != c.thin || within < c.inPack {
				t.Errorf("%d thin deltas and %d within the pack; want %d and at least %d", thin, within, c.thin, c.inPack)
			}
			if pack.Len() > c.maxPack {
				t.Errorf("pack of %d bytes, want at most %d", pack.Len(), c.maxPack)
			}

			if thin > 0 {
				if err := indexPack(dir, pack.Bytes(), "--strict"); err == nil {
					t.Fatal("git index-pack took a thin pack without --fix-thin: the pack is not thin")
				}
			}
			if err := indexPack(dir, pack.Bytes(), "--strict", "--fix-thin"); err != nil {
				t.Fatal(err)
			}
			commitMain(t, dir, tip, baseCommit)
			fsck(t, dir)
			if got := strings.TrimSpace(git(t, dir, nil, "rev-parse", "main^{tree}")); got != tip.String() {
				t.Fatalf("main's tree is %s, want %s", got, tip)
			}
			if got, w := codecListing(t, s, tip), gitListing(t, dir, tip); !slices.Equal(got, w) {
				t.Errorf("the codec lists\n%s\ngit lists\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
			if got := catFile(t, dir, []string{"main:big/kustomization.yaml"})["main:big/kustomization.yaml"]; !bytes.Equal(got, blobContent(t, s, cache, tip, "big/kustomization.yaml")) {
				t.Errorf("git reads big/kustomization.yaml as %d bytes, unlike the codec's", len(got))
			}
		})
	}
}

// blobContent is the content of the file p of tree, read by the codec.
func blobContent(t testing.TB, s storer.EncodedObjectStorer, cache *TreeCache, tree plumbing.Hash, p string) []byte {
	t.Helper()
	b, err := ReadBlob(s, blobAt(t, s, cache, tree, p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// packDeltaBases lists the base of each delta of pack, in order, read with
// go-git's pack scanner.
func packDeltaBases(t testing.TB, pack []byte) []plumbing.Hash {
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
