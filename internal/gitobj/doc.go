// Package gitobj is the git object codec: it encodes and decodes git
// objects in go-git's object storage without a worktree, so that the cost
// of a change follows its size, not the repository's. It builds trees
// from path-to-content changes (WriteTree), reading and keeping decoded
// trees in a TreeCache (Tree, TreeEntry, DecodeTree, EncodeTree), writes
// blobs and other objects as they are (WriteObject, WriteBlob, ReadBlob),
// and writes thin packs whose changed trees and files go as deltas against
// the versions they replace (WritePack).
//
// It knows nothing of remotes, refs, clones or pushes: it depends only on
// go-git's plumbing and storer types and the standard library. The clone,
// fetch and push (internal/gitrepo) call it.
package gitobj
