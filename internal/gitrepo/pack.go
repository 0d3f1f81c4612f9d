package gitrepo

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
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

// writePack writes a thin pack of hashes to w. A tree with a base in bases
// (the tree it replaces, which the server has or which comes earlier in the
// pack) is sent as a delta against it: copy the common prefix, insert the
// middle, copy the common suffix. Adding a tenant to a tier of 10,000 then
// sends about a hundred bytes for the tier's folder instead of its 400 KB
// tree, and nothing large is compressed. Objects are compressed for speed.
func writePack(w io.Writer, s storer.EncodedObjectStorer, hashes []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	seen := make(map[plumbing.Hash]bool, len(hashes))
	unique := hashes[:0:0]
	for _, h := range hashes {
		if !seen[h] {
			seen[h] = true
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
	zw, err := zlib.NewWriterLevel(nil, zlib.BestSpeed)
	if err != nil {
		return err
	}
	for _, hash := range hashes {
		typ, content, err := readObject(s, hash)
		if err != nil {
			return err
		}
		var delta []byte
		if b, ok := bases[hash]; ok && typ == packTree {
			if bt, bc, err := readObject(s, b); err == nil && bt == packTree && len(bc) > 0 {
				delta = treeDelta(bc, content)
			}
		}
		var body []byte
		if delta != nil {
			body = delta
			if _, err := out.Write(objectHeader(packRefDelta, len(body))); err != nil {
				return err
			}
			b := bases[hash]
			if _, err := out.Write(b[:]); err != nil {
				return err
			}
		} else {
			body = content
			if _, err := out.Write(objectHeader(typ, len(body))); err != nil {
				return err
			}
		}
		zw.Reset(out)
		if _, err := zw.Write(body); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
	}
	_, err = w.Write(h.Sum(nil))
	return err
}

// readObject returns an object's pack type and content.
func readObject(s storer.EncodedObjectStorer, hash plumbing.Hash) (int, []byte, error) {
	obj, err := s.EncodedObject(plumbing.AnyObject, hash)
	if err != nil {
		return 0, nil, fmt.Errorf("read object %s: %w", hash, err)
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
		return 0, nil, fmt.Errorf("object %s has type %s", hash, obj.Type())
	}
	rd, err := obj.Reader()
	if err != nil {
		return 0, nil, err
	}
	defer rd.Close()
	content, err := io.ReadAll(rd)
	if err != nil {
		return 0, nil, fmt.Errorf("read object %s: %w", hash, err)
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

// treeDelta is a git delta turning base into target, or nil when sending
// target whole is as good. One entry added, removed or changed (one tenant
// per commit) makes a prefix-and-suffix delta of a hundred bytes; edits
// far apart fall back to go-git's general delta.
func treeDelta(base, target []byte) []byte {
	d := prefixSuffixDelta(base, target)
	if len(d) < len(target)/8 {
		return d
	}
	if g := packfile.DiffDelta(base, target); len(g) < len(d) {
		d = g
	}
	if len(d) >= len(target)/2 {
		return nil
	}
	return d
}

// prefixSuffixDelta is a git delta turning base into target: the common
// prefix and suffix are copied from base, the rest inserted.
func prefixSuffixDelta(base, target []byte) []byte {
	p := 0
	for p < len(base) && p < len(target) && base[p] == target[p] {
		p++
	}
	s := 0
	for s < len(base)-p && s < len(target)-p && base[len(base)-1-s] == target[len(target)-1-s] {
		s++
	}
	var d bytes.Buffer
	d.Write(varint(len(base)))
	d.Write(varint(len(target)))
	deltaCopy(&d, 0, p)
	for mid := target[p : len(target)-s]; len(mid) > 0; {
		n := min(len(mid), 0x7f)
		d.WriteByte(byte(n))
		d.Write(mid[:n])
		mid = mid[n:]
	}
	deltaCopy(&d, len(base)-s, s)
	return d.Bytes()
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
