package gitobj

import (
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Pack object types (git's pack format).
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packRefDelta = 7
)

// ThinMin is the size from which an object is sent as a delta against a
// base the server already holds (a thin delta) rather than whole. The
// server's index-pack reads each such base out of its own packs and appends
// it to the pack it keeps, work that grows with the repository's history:
// for a few KB (a shard folder's tree or list, a ledger group) sending the
// object whole costs the server less. Above it are the trees and lists of
// big folders (a tier of 1,000 tenants: about 45 KB), where the delta saves
// what matters.
const ThinMin = 16 << 10

// WritePack writes a thin pack (git's pack format, version 2) of the objects
// hashes, read from s, to w; an object named twice is written once, at its
// first place. A tree or file with a base in bases (the version it
// replaces, which the receiver has or which comes earlier in the pack) is
// sent as a delta against it, naming the base by its hash (see treeDelta
// and fileDelta): always when the base comes earlier in the pack, and when
// the receiver has it, only from ThinMin bytes (deltaBase). Adding a tenant
// to a tier of 10,000 then sends about a hundred bytes for the tier's
// folder instead of its 400 KB tree, and nothing large is compressed.
// Objects are compressed for speed. The receiver completes the pack with
// the bases it holds (git index-pack --fix-thin, as receive-pack runs it);
// ObjectLog.Bases is what a commit's WriteTree recorded for this.
func WritePack(w io.Writer, s storer.EncodedObjectStorer, hashes []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	at := make(map[plumbing.Hash]int, len(hashes)) // each object's place in the pack
	unique := hashes[:0:0]
	for _, h := range hashes {
		if _, ok := at[h]; !ok {
			at[h] = len(unique)
			unique = append(unique, h)
		}
	}
	hashes = unique
	h := sha1.New()
	out := io.MultiWriter(w, h)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(hashes)))
	if _, err := out.Write(hdr[:]); err != nil {
		return err
	}
	zw := zlibWriters.Get().(*zlib.Writer)
	defer zlibWriters.Put(zw)
	for i, hash := range hashes {
		typ, content, err := readObject(s, hash)
		if err != nil {
			return err
		}
		header, body := objectHeader(typ, len(content)), []byte(nil)
		if base, ok := bases[hash]; ok && deltaBase(at, i, base, len(content)) {
			if d := deltaFrom(s, base, typ, content); d != nil {
				header, body = append(objectHeader(packRefDelta, len(d)), base[:]...), d
			}
		}
		if body == nil {
			body = []byte(content) // whole objects are the small ones, or a first push
		}
		if _, err := out.Write(header); err != nil {
			return err
		}
		zw.Reset(out)
		if _, err := zw.Write(body); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// deltaBase says whether the object at place i of a pack, of size bytes,
// goes as a delta against base: a base earlier in the pack at any size, one
// the server holds from ThinMin. A base later in the pack is refused, so
// that no two objects are deltas of each other: a batch whose change comes
// back to an earlier version (a tenant onboarded and offboarded in one
// push) would otherwise send a pack no server can resolve.
func deltaBase(at map[plumbing.Hash]int, i int, base plumbing.Hash, size int) bool {
	if j, ok := at[base]; ok {
		return j < i
	}
	return size >= ThinMin
}

// zlibWriters are reused between packs: a new writer allocates about 1 MB
// of tables, more than a one-tenant pack takes to compress.
var zlibWriters = sync.Pool{New: func() any {
	zw, _ := zlib.NewWriterLevel(nil, zlib.BestSpeed) // a valid level: no error
	return zw
}}

// deltaFrom is a delta turning the object base into content (of pack type
// typ), or nil when there is none worth sending.
func deltaFrom(s storer.EncodedObjectStorer, base plumbing.Hash, typ int, content string) []byte {
	bt, bc, err := readObject(s, base)
	if err != nil || bt != typ || len(bc) == 0 {
		return nil
	}
	if typ == packTree {
		return treeDelta(bc, content)
	}
	return fileDelta(bc, content)
}

// readObject returns an object's pack type and content.
func readObject(s storer.EncodedObjectStorer, hash plumbing.Hash) (int, string, error) {
	obj, err := s.EncodedObject(plumbing.AnyObject, hash)
	if err != nil {
		return 0, "", fmt.Errorf("read object %s: %w", hash, err)
	}
	var typ int
	switch obj.Type() {
	case plumbing.CommitObject:
		typ = packCommit
	case plumbing.TreeObject:
		typ = packTree
	case plumbing.BlobObject:
		typ = packBlob
	case plumbing.TagObject:
		typ = packTag
	default:
		return 0, "", fmt.Errorf("object %s has type %s", hash, obj.Type())
	}
	content, err := objectString(obj)
	if err != nil {
		return 0, "", fmt.Errorf("read object %s: %w", hash, err)
	}
	return typ, content, nil
}

// objectHeader encodes a pack entry's type and size.
func objectHeader(typ, size int) []byte {
	b := []byte{byte(typ<<4) | byte(size&0x0f)}
	size >>= 4
	for size > 0 {
		b[len(b)-1] |= 0x80
		b = append(b, byte(size&0x7f))
		size >>= 7
	}
	return b
}
