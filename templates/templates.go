// Package templates holds the project's own copy of the platform's GitOps
// layout (tier templates, tenant and pooled-env kustomizations), byte for byte
// as the reference repository has it. `make run` seeds its local git server
// from it, and tests use it as the starting tree.
package templates

import (
	"embed"
	"io/fs"
	"testing/fstest"
)

// FS holds application-plane/production/... as in the reference repository.
//
//go:embed all:application-plane
var FS embed.FS

// Root is the GITOPS_ROOT of the embedded tree.
const Root = "application-plane/production"

// Files returns every embedded file by path, for seeding test trees.
func Files() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS, p)
		files[p] = b
		return err
	})
	return files, err
}

// MapFS returns the embedded tree as a writable in-memory file system, a
// starting tree for tests that edit it.
func MapFS() (fstest.MapFS, error) {
	files, err := Files()
	m := fstest.MapFS{}
	for p, b := range files {
		m[p] = &fstest.MapFile{Data: b}
	}
	return m, err
}
