// Package artifact makes the archive of one folder of a commit, in the form
// Flux's kustomize-controller fetches for a Kustomization whose source is
// an ExternalArtifact: a gzip-compressed tar of the folder's files, names
// relative to it, and the archive's content digest, so that a
// Kustomization reconciles only when its own folder changed (issue 21).
// The bytes depend on nothing but the folder's content: any replica builds
// the same archive, with the same digest, from the same tree.
package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
)

// Source is a snapshot of the repository: a folder's files with an id of
// each one's content, its subfolders, and contents by id (a git snapshot
// is one).
type Source interface {
	Entries(dir string) (files map[string]string, dirs []string, err error)
	ReadBlob(id string) ([]byte, error)
}

// Artifact is the archive of a folder.
type Artifact struct {
	// Data is the .tar.gz.
	Data []byte
	// Digest is "sha256:<hex>" of Data, which kustomize-controller checks
	// after each download.
	Digest string
}

// Build archives dir of src, its subfolders included, in the format
// format.go defines: the same folder gives the same bytes whatever Go
// release built the worker.
func Build(src Source, dir string) (Artifact, error) {
	var buf bytes.Buffer
	tw := tarWriter{&buf}
	if err := add(tw, src, dir, ""); err != nil {
		return Artifact{}, err
	}
	tw.end()
	data := gzipStored(buf.Bytes())
	sum := sha256.Sum256(data)
	return Artifact{Data: data, Digest: "sha256:" + hex.EncodeToString(sum[:])}, nil
}

// add writes the files of dir, then its folders, each in name order, under
// rel (the path inside the archive).
func add(tw tarWriter, src Source, dir, rel string) error {
	files, dirs, err := src.Entries(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		content, err := src.ReadBlob(files[name])
		if err != nil {
			return fmt.Errorf("read %s: %w", path.Join(dir, name), err)
		}
		// Fixed headers: owner, mode and times say nothing of where or
		// when the archive was made, so its digest is the content's.
		if err := tw.file(path.Join(rel, name), content); err != nil {
			return fmt.Errorf("archive %s: %w", dir, err)
		}
	}
	for _, d := range slices.Sorted(slices.Values(dirs)) {
		name := path.Join(rel, d)
		if err := tw.folder(name); err != nil {
			return fmt.Errorf("archive %s: %w", dir, err)
		}
		if err := add(tw, src, path.Join(dir, d), name); err != nil {
			return err
		}
	}
	return nil
}
