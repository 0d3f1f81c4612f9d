package validate

import (
	"fmt"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/kyaml/resid"
)

// dupIndex is the duplicate-id check of one folder, kept between checks:
// the files last checked (with their content identifiers) and which file owns each
// resource id. A check then looks only at the files that changed since,
// instead of rehashing 20,000 ids at 10,000 tenants.
type dupIndex struct {
	mu    sync.Mutex         // held by the check using it
	files map[fileKey]string // file -> content identifier
	owner map[string]fileKey // resource id -> the file that holds it
	// last is the list files was last brought to, in order, and exact
	// tells that it names no file twice (so its keys are exactly those of
	// files). Its strings share memory with the tree and kustomization they
	// came from, which it keeps alive until the next check.
	last  []resourceFile
	exact bool
	// effective keys ids by kustomize's effective namespace (none and
	// "default" are one for a namespaced kind, a cluster-scoped kind has
	// none): exact where no kustomization transforms ids. Elsewhere ids
	// are keyed as written, since a prefix or a namespace of a folder can
	// keep apart what the effective namespace would merge.
	effective bool
}

// key is how the index tells resources apart.
func (x *dupIndex) key(id resid.ResId) string {
	ns := id.Namespace
	if x.effective {
		ns = id.EffectiveNamespace()
	}
	return id.Group + "/" + id.Version + "|" + id.Kind + "|" + ns + "|" + id.Name
}

// update brings the index to files, or returns the first duplicate id and
// leaves the index as it was. The caller holds x.mu and must not change
// files afterwards.
func (x *dupIndex) update(c *Checker, src Indexer, dir string, files []resourceFile) error {
	// A check usually repeats the last list with an entry added or removed
	// somewhere: the common head and tail are in the index as they are, and
	// comparing them in order is far cheaper than looking 10,000 files up.
	head, tail := 0, 0
	if x.exact {
		for head < len(files) && head < len(x.last) && files[head] == x.last[head] {
			head++
		}
		for tail < len(files)-head && tail < len(x.last)-head && files[len(files)-1-tail] == x.last[len(x.last)-1-tail] {
			tail++
		}
	}
	mid := files[head : len(files)-tail]
	var added, gone []resourceFile // gone: files removed, or the old version of changed ones
	var lastMid map[fileKey]bool
	if x.exact {
		lastMid = make(map[fileKey]bool, len(x.last)-head-tail)
		for _, f := range x.last[head : len(x.last)-tail] {
			lastMid[f.fileKey] = true
		}
	}
	inMid := make(map[fileKey]bool, len(mid))
	for _, f := range mid {
		h, ok := x.files[f.fileKey]
		// A file listed twice (earlier in the middle, or also in the head
		// or tail) is checked as new, so that it clashes with itself when
		// it holds resources, as kustomize would.
		again := inMid[f.fileKey] || (ok && x.exact && !lastMid[f.fileKey])
		inMid[f.fileKey] = true
		switch {
		case !ok || again:
			added = append(added, f)
		case h != f.hash:
			added = append(added, f)
			gone = append(gone, resourceFile{f.fileKey, h})
		}
	}
	if x.exact {
		// The keys of the last list's middle are the only ones the head
		// and tail do not hold.
		for _, f := range x.last[head : len(x.last)-tail] {
			if !inMid[f.fileKey] {
				gone = append(gone, f)
			}
		}
	} else {
		for k, h := range x.files {
			if !inMid[k] {
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
		for _, rid := range ids {
			if id := x.key(rid); x.owner[id] == f.fileKey {
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
		for _, rid := range ids {
			newIDs[i] = append(newIDs[i], x.key(rid))
		}
		for _, id := range newIDs[i] {
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
	x.last, x.exact = files, len(x.files) == len(files)
	return nil
}

// dupIndexFor returns the folder's index, new and empty the first time and
// whenever the keying changes.
func (c *Checker) dupIndexFor(dir string, effective bool) *dupIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dups == nil {
		c.dups = map[string]*dupIndex{}
	}
	x, ok := c.dups[dir]
	if !ok || x.effective != effective {
		x = &dupIndex{files: map[fileKey]string{}, owner: map[string]fileKey{}, effective: effective}
		c.dups[dir] = x
	}
	return x
}
