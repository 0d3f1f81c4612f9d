package artifact

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
)

// The archive's bytes are written here, field by field, not by archive/tar
// and compress/gzip, whose output no Go release promises to keep: two
// replicas built by different Go versions, during a rollout, would serve
// one folder under two digests, and each would overwrite the other's
// ExternalArtifact with its own (every shard Kustomization applying
// again), while a fetch the other replica served would fail its checksum.
// So the format is defined by this file alone: a POSIX ustar archive
// (fixed owner, mode and time) in a gzip member whose deflate stream is
// made of stored blocks (no compression, which no two compressors need
// agree on). Tenant files are small; an archive is a few hundred KB.

// tarWriter writes a ustar archive.
type tarWriter struct{ buf *bytes.Buffer }

// header writes a ustar header for name (a file of size bytes, or a
// folder), with a fixed mode, owner and time.
func (w tarWriter) header(name string, size int64, dir bool) error {
	var h [512]byte
	prefix, base, err := splitName(name)
	if err != nil {
		return err
	}
	copy(h[0:100], base)
	mode, flag := "0000600", byte('0')
	if dir {
		mode, flag = "0000750", '5'
	}
	octal(h[100:108], mode)
	octal(h[108:116], "0000000") // uid
	octal(h[116:124], "0000000") // gid
	octal(h[124:136], fmt.Sprintf("%011o", size))
	octal(h[136:148], "00000000000") // mtime: the epoch
	h[156] = flag
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	copy(h[345:500], prefix)
	// The checksum is of the header with its own field as blanks.
	copy(h[148:156], "        ")
	var sum int
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	w.buf.Write(h[:])
	return nil
}

// octal writes s, an octal number of len(field)-1 digits, and a NUL.
func octal(field []byte, s string) {
	copy(field, s)
	field[len(field)-1] = 0
}

// splitName splits a path for ustar's prefix (155 bytes) and name (100).
func splitName(name string) (prefix, base string, err error) {
	if len(name) <= 100 {
		return "", name, nil
	}
	for i := len(name) - 1; i > 0; i-- {
		if name[i] == '/' && i <= 155 && len(name)-i-1 <= 100 {
			return name[:i], name[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("%s: a name too long for the archive (ustar: 155 and 100 bytes)", name)
}

// file writes a file's header and content, padded to 512 bytes.
func (w tarWriter) file(name string, content []byte) error {
	if err := w.header(name, int64(len(content)), false); err != nil {
		return err
	}
	w.buf.Write(content)
	w.pad(len(content))
	return nil
}

// folder writes a folder's header.
func (w tarWriter) folder(name string) error {
	return w.header(strings.TrimSuffix(name, "/")+"/", 0, true)
}

func (w tarWriter) pad(n int) {
	if r := n % 512; r != 0 {
		w.buf.Write(make([]byte, 512-r))
	}
}

// end writes the two zero blocks that end a tar archive.
func (w tarWriter) end() { w.buf.Write(make([]byte, 1024)) }

// storedBlock is the most a stored deflate block holds.
const storedBlock = 65535

// gzipStored is data as one gzip member (RFC 1952: no name, time 0,
// operating system "unknown") whose deflate stream (RFC 1951) is stored
// blocks.
func gzipStored(data []byte) []byte {
	out := bytes.NewBuffer(make([]byte, 0, len(data)+len(data)/storedBlock*5+32))
	out.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	for rest := data; ; {
		n := min(len(rest), storedBlock)
		final := byte(0)
		if n == len(rest) {
			final = 1
		}
		out.WriteByte(final) // BFINAL, BTYPE 00, then byte-aligned
		var l [4]byte
		binary.LittleEndian.PutUint16(l[0:2], uint16(n))
		binary.LittleEndian.PutUint16(l[2:4], ^uint16(n))
		out.Write(l[:])
		out.Write(rest[:n])
		rest = rest[n:]
		if final == 1 {
			break
		}
	}
	var tail [8]byte
	binary.LittleEndian.PutUint32(tail[0:4], crc32.ChecksumIEEE(data))
	binary.LittleEndian.PutUint32(tail[4:8], uint32(len(data)))
	out.Write(tail[:])
	return out.Bytes()
}
