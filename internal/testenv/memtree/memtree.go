// Package memtree is a repository snapshot in memory, for the tests of
// packages that read one (gitops.Reader, artifact.Source and the like)
// without a git server: paths map to contents, and a content's id is the
// content itself.
package memtree

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"maps"
	"slices"
	"strings"
)

// Tree maps slash-separated paths to file contents.
type Tree map[string]string

// ReadFile returns the content of a file.
func (t Tree) ReadFile(name string) ([]byte, error) {
	if c, ok := t[name]; ok {
		return []byte(c), nil
	}
	return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
}

// Entries lists a folder's files, each with its content as id, and its
// subfolders; fs.ErrNotExist when nothing is below dir.
func (t Tree) Entries(dir string) (map[string]string, []string, error) {
	files, seen := map[string]string{}, map[string]bool{}
	var dirs []string
	for p, c := range t {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			continue
		}
		if d, _, nested := strings.Cut(rest, "/"); nested {
			if !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
			continue
		}
		files[rest] = c
	}
	if len(files) == 0 && len(dirs) == 0 {
		return nil, nil, &fs.PathError{Op: "read", Path: dir, Err: fs.ErrNotExist}
	}
	slices.Sort(dirs)
	return files, dirs, nil
}

// ReadDir lists the names of a folder's files and subfolders, sorted.
func (t Tree) ReadDir(dir string) ([]string, error) {
	files, dirs, err := t.Entries(dir)
	return slices.Sorted(slices.Values(append(slices.Collect(maps.Keys(files)), dirs...))), err
}

// ReadBlob returns the content whose id is id: id itself.
func (t Tree) ReadBlob(id string) ([]byte, error) { return []byte(id), nil }

// DirHash is a digest of every path and content below dir.
func (t Tree) DirHash(dir string) (string, error) {
	if _, _, err := t.Entries(dir); err != nil {
		return "", err
	}
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(t)) {
		if strings.HasPrefix(p, dir+"/") {
			h.Write([]byte(p + "\x00" + t[p] + "\x00"))
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
