package gitrepo

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// noThin is the receive-pack capability of a server that refuses thin
// packs (packs whose deltas name bases the pack does not hold).
const noThin capability.Capability = "no-thin"

// Pack object types (git's pack format).
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packRefDelta = 7
)

// thinMin is the size from which an object is sent as a delta against a
// base the server already holds (a thin delta) rather than whole. The
// server's index-pack reads each such base out of its own packs and appends
// it to the pack it keeps, work that grows with the repository's history:
// for a few KB (a shard folder's tree or list, a ledger group) sending the
// object whole costs the server less. Above it are the trees and lists of
// big folders (a tier of 1,000 tenants: about 45 KB), where the delta saves
// what matters.
const thinMin = 16 << 10

// writePack writes a thin pack of hashes to w. A tree or file with a base in
// bases (the version it replaces, which the server has or which comes
// earlier in the pack) is sent as a delta against it (see treeDelta and
// fileDelta): always when the base comes earlier in the pack, and when the
// server has it, only from thinMin bytes (deltaBase). Adding a tenant to a tier of 10,000 then
// sends about a hundred bytes for the tier's folder instead of its 400 KB
// tree, and nothing large is compressed. Objects are compressed for speed.
func writePack(w io.Writer, s storer.EncodedObjectStorer, hashes []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
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
// the server holds from thinMin. A base later in the pack is refused, so
// that no two objects are deltas of each other: a batch whose change comes
// back to an earlier version (a tenant onboarded and offboarded in one
// push) would otherwise send a pack no server can resolve.
func deltaBase(at map[plumbing.Hash]int, i int, base plumbing.Hash, size int) bool {
	if j, ok := at[base]; ok {
		return j < i
	}
	return size >= thinMin
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

// treeDelta is a git delta turning the tree base into the tree target, or
// nil when sending target whole is as good (or either is malformed). Both
// trees are walked entry by entry in git's order, as a merge: runs of
// entries they share become copy instructions, and only the entries target
// adds or changes are inserted. A commit changing a few tenants of a folder
// of 10,000 sends about a hundred bytes per change, wherever the names sort.
func treeDelta(base, target string) []byte {
	var d deltaWriter
	d.d.Write(varint(len(base)))
	d.d.Write(varint(len(target)))
	bi, ti := 0, 0
	for ti < len(target) {
		te, tend, err := parseEntry(target, ti)
		if err != nil {
			return nil
		}
		if bi < len(base) {
			be, bend, err := parseEntry(base, bi)
			if err != nil {
				return nil
			}
			c := compareEntries(be, te)
			if c < 0 { // removed from base
				bi = bend
				continue
			}
			if c == 0 {
				if base[bi:bend] == target[ti:tend] {
					d.copy(bi, bend-bi)
				} else {
					d.insert(target[ti:tend])
				}
				bi, ti = bend, tend
				continue
			}
		}
		d.insert(target[ti:tend]) // added in target
		ti = tend
	}
	out := d.finish()
	if len(out) >= len(target)/2 {
		return nil
	}
	return out
}

// fileDelta is a git delta turning base into target, copying their common
// prefix and suffix and inserting the rest, or nil when sending target
// whole is as good. A kustomization that gains or loses a line is sent as
// a few dozen bytes instead of its 200 KB at 10,000 tenants, and nothing
// large is compressed on either side.
func fileDelta(base, target string) []byte {
	p := 0
	for p < len(base) && p < len(target) && base[p] == target[p] {
		p++
	}
	s := 0
	for s < len(base)-p && s < len(target)-p && base[len(base)-1-s] == target[len(target)-1-s] {
		s++
	}
	var d deltaWriter
	d.d.Write(varint(len(base)))
	d.d.Write(varint(len(target)))
	d.copy(0, p)
	d.insert(target[p : len(target)-s])
	d.copy(len(base)-s, s)
	out := d.finish()
	if len(out) >= len(target)/2 {
		return nil
	}
	return out
}

// deltaWriter builds a git delta, merging adjacent copies and inserts.
type deltaWriter struct {
	d         bytes.Buffer
	copyOff   int
	copyLen   int
	insertBuf []byte
}

func (w *deltaWriter) copy(off, n int) {
	w.flushInsert()
	if w.copyLen > 0 && w.copyOff+w.copyLen == off {
		w.copyLen += n
		return
	}
	w.flushCopy()
	w.copyOff, w.copyLen = off, n
}

func (w *deltaWriter) insert(s string) {
	w.flushCopy()
	w.insertBuf = append(w.insertBuf, s...)
}

func (w *deltaWriter) flushCopy() {
	deltaCopy(&w.d, w.copyOff, w.copyLen)
	w.copyLen = 0
}

func (w *deltaWriter) flushInsert() {
	for mid := w.insertBuf; len(mid) > 0; {
		n := min(len(mid), 0x7f)
		w.d.WriteByte(byte(n))
		w.d.Write(mid[:n])
		mid = mid[n:]
	}
	w.insertBuf = w.insertBuf[:0]
}

func (w *deltaWriter) finish() []byte {
	w.flushCopy()
	w.flushInsert()
	return w.d.Bytes()
}

// deltaCopy appends copy instructions for base[off:off+n], in chunks git
// accepts (at most 64 KiB each).
func deltaCopy(d *bytes.Buffer, off, n int) {
	for n > 0 {
		size := min(n, 0x10000)
		op := byte(0x80)
		var args []byte
		for i := range 4 {
			if v := byte(off >> (8 * i)); v != 0 {
				op |= 1 << i
				args = append(args, v)
			}
		}
		if size != 0x10000 { // a size of 0 means 64 KiB
			for i := range 2 {
				if v := byte(size >> (8 * i)); v != 0 {
					op |= 1 << (4 + i)
					args = append(args, v)
				}
			}
		}
		d.WriteByte(op)
		d.Write(args)
		off += size
		n -= size
	}
}

// varint encodes a size as git deltas do: 7 bits at a time, low first.
func varint(n int) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}
