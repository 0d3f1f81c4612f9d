package validate

import (
	"fmt"
	"strings"
	"sync"
)

// dupIndex is the duplicate-id check of one folder, kept between checks:
// the files last checked (with their content identifiers) and which file owns each
// resource id. A check then looks only at the files that changed since,
// instead of rehashing 20,000 ids at 10,000 tenants.
type dupIndex struct {
	mu    sync.Mutex         // held by the check using it
	files map[fileKey]string // file -> content identifier
	owner map[string]fileKey // resource id -> the file that holds it
}

// update brings the index to files, or returns the first duplicate id and
// leaves the index as it was. The caller holds x.mu.
func (x *dupIndex) update(c *Checker, src Indexer, dir string, files []resourceFile) error {
	var added, gone []resourceFile // gone: files removed, or the old version of changed ones
	seen := 0
	for _, f := range files {
		h, ok := x.files[f.fileKey]
		switch {
		case !ok:
			added = append(added, f)
		case h != f.hash:
			seen++
			added = append(added, f)
			gone = append(gone, resourceFile{f.fileKey, h})
		default:
			seen++
		}
	}
	if seen != len(x.files) {
		current := make(map[fileKey]bool, len(files))
		for _, f := range files {
			current[f.fileKey] = true
		}
		for k, h := range x.files {
			if !current[k] {
				gone = append(gone, resourceFile{k, h})
			}
		}
	}

	// Check first: the index changes only when the new state is valid.
	freed := map[string]bool{}
	for _, f := range gone {
		ids, err := c.ids.get(src, f)
		if err != nil {
			return fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		for _, id := range ids {
			if x.owner[id] == f.fileKey {
				freed[id] = true
			}
		}
	}
	claimed := map[string]fileKey{}
	newIDs := make([][]string, len(added))
	for i, f := range added {
		ids, err := c.ids.get(src, f)
		if err != nil {
			return fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		newIDs[i] = ids
		for _, id := range ids {
			other, dup := claimed[id]
			if !dup {
				if o, ok := x.owner[id]; ok && !freed[id] {
					other, dup = o, true
				}
			}
			if dup {
				return fmt.Errorf("kustomize build %s: may not add resource with an already registered id: %s (in %s and %s)",
					dir, strings.ReplaceAll(id, "|", " "), other.path(), f.path())
			}
			claimed[id] = f.fileKey
		}
	}
	for id := range freed {
		delete(x.owner, id)
	}
	for _, f := range gone {
		if x.files[f.fileKey] == f.hash {
			delete(x.files, f.fileKey)
		}
	}
	for i, f := range added {
		// The strings of files may share memory with a whole tree or
		// kustomization: what the index keeps is copied.
		k := f.fileKey.clone()
		x.files[k] = strings.Clone(f.hash)
		for _, id := range newIDs[i] {
			x.owner[id] = k
		}
	}
	return nil
}

// dupIndexFor returns the folder's index, new and empty the first time.
func (c *Checker) dupIndexFor(dir string) *dupIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dups == nil {
		c.dups = map[string]*dupIndex{}
	}
	x, ok := c.dups[dir]
	if !ok {
		x = &dupIndex{files: map[fileKey]string{}, owner: map[string]fileKey{}}
		c.dups[dir] = x
	}
	return x
}
