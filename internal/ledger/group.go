package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The tree's two folders, and the form of an hour folder's name.
const (
	targetsDir  = "targets"
	messagesDir = "messages"
	hourForm    = "2006010215" // YYYYMMDDHH, UTC
	hourMS      = int64(time.Hour / time.Millisecond)
)

// bucket is the group a target's key falls in: the first four hex digits
// of its sha256 (65,536 groups).
func bucket(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:2])
}

// targetPath is the group file that holds target, a key as written: one
// folder level per hex digit, targets/<h0>/<h1>/<h2>/<h3>, so that every
// tree a record's path rewrites holds at most 16 entries however many
// targets the ledger holds.
func targetPath(target string) string {
	b := bucket(target)
	return targetsDir + "/" + b[:1] + "/" + b[1:2] + "/" + b[2:3] + "/" + b[3:]
}

// formerTargetPath is where versions before 2026-12-05 kept the same
// group: targets/<h0h1>/<h2h3>, two levels of 256, whose folders grew with
// the targets (160 entries at 21,000 tenants) and were rewritten by every
// record. Its names (two hex digits) are not those of targetPath's first
// level (one), so both fit one targets folder while the records move.
func formerTargetPath(target string) string {
	b := bucket(target)
	return targetsDir + "/" + b[:2] + "/" + b[2:]
}

// messageGroupPath is the group of message id sent at sent (Unix ms) in
// its hour, messages/<hour, UTC>/<h0h1>, or with a minute folder in that
// minute, messages/<hour, UTC>/m<minute>/<h0h1>.
func messageGroupPath(id string, sent int64, minute string) string {
	h, _ := hourOf(sent)
	return path.Join(messagesDir, h, minute, hourBucket(id))
}

// hourGroupLimit is how many ids an hour group takes before the messages
// of its bucket go to their minute's group. A day of 1,000,000 ids holds
// about 160 a group and stays in hour groups (6,144 files a day; a group
// per minute would make that 340,000 files, which a clone holds as as many
// objects). An hour of a backlog at the 200 messages/s a worker applies at
// most fills them in minutes, and then writes groups of about 50 ids. The
// file a message rewrites holds at most 256 ids unless more than 256
// messages of one bucket were sent within one minute (about 65,000
// messages sent in a minute): a minute group has no limit of its own.
const hourGroupLimit = 256

// hourBucket is the folder level of a message id within its hour or
// minute: the first two hex digits of its sha256 (256 groups).
func hourBucket(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:1])
}

// minuteOf is the minute folder, within its hour, of a message sent at
// sent (Unix ms): "m" and two digits, which no hex bucket of the former
// one-level layout is.
func minuteOf(sent int64) string {
	return fmt.Sprintf("m%02d", time.UnixMilli(sent).UTC().Minute())
}

// hourOf is the hour folder of a message sent at sent (Unix ms), and the
// hour's start.
func hourOf(sent int64) (name string, start int64) {
	t := time.UnixMilli(sent).UTC().Truncate(time.Hour)
	return t.Format(hourForm), t.UnixMilli()
}

// newTargets is the empty group that holds target, a key as written.
func newTargets(target string) *group {
	return &group{path: targetPath(target), former: formerTargetPath(target), bucket: bucket(target), targets: map[string]Record{}}
}

// hourStart is the start (Unix ms) of the hour an hour folder's name
// gives; false for any other name.
func hourStart(name string) (int64, bool) {
	t, err := time.ParseInLocation(hourForm, name, time.UTC)
	if err != nil || t.Format(hourForm) != name {
		return 0, false
	}
	return t.UnixMilli(), true
}

// group is one file of the tree: a group of targets or of message ids.
type group struct {
	path    string
	former  string            // a targets group: its path before 2026-12-05 (formerTargetPath)
	bucket  string            // a targets group: "h0h1h2h3"; a messages group: "h0h1"
	targets map[string]Record // a targets group
	ids     map[string]int64  // a messages group: id -> send time
	hour    string            // a messages group: its hour folder
	minute  string            // a minute group: its minute folder ("" for an hour group)
	start   int64             // a messages group: its hour's start (Unix ms)
	existed bool              // the tree holds the file
	moved   bool              // a targets group: the tree holds its former file too, read and merged
	dirty   bool              // changed since read
	broken  bool              // unreadable: answers as empty, never written
}

func (g *group) messages() bool { return g.ids != nil }

// parse reads a group file. Target keys are read in their current form
// (see canonical), as the flat files were; a key that the current form
// puts in another group stays here, found by no lookup, until the group is
// pruned of it.
func (g *group) parse(b []byte) error {
	if g.messages() {
		return each(b, func(id string, ms int64, _ string) { g.ids[id] = ms })
	}
	return each(b, func(key string, ms int64, value string) {
		set(g.targets, canonical(key), ms, value)
	})
}

// set is Set on one group's records; it reports whether it changed them.
// Two lines may name one target in its two forms (see canonical): the
// newer record is the one that counts.
func set(records map[string]Record, target string, ms int64, value string) bool {
	if last, ok := records[target]; ok && (ms < last.MS || ms == last.MS && value == last.Value) {
		return false
	}
	records[target] = Record{MS: ms, Value: value}
	return true
}

// render is the group's file: a header, then one line per record, sorted,
// so that a change edits one line. Nil when the group is empty.
func (g *group) render() []byte {
	var b bytes.Buffer
	if g.messages() {
		if len(g.ids) == 0 {
			return nil
		}
		when := "the hour " + g.hour
		if g.minute != "" {
			when += ", minute " + strings.TrimPrefix(g.minute, "m")
		}
		fmt.Fprintf(&b, "# tenant-worker ledger: messages applied, sent in %s UTC, whose id's sha256 starts %s: id, send time (Unix ms, SQS SentTimestamp)\n",
			when, g.bucket)
		for _, id := range slices.Sorted(maps.Keys(g.ids)) {
			fmt.Fprintf(&b, "%s %d\n", id, g.ids[id])
		}
		return b.Bytes()
	}
	if len(g.targets) == 0 {
		return nil
	}
	fmt.Fprintf(&b, "# tenant-worker ledger: targets whose key's sha256 starts %s: key, send time (Unix ms, SQS SentTimestamp) of the last message applied to it, value\n",
		g.bucket)
	for _, k := range slices.Sorted(maps.Keys(g.targets)) {
		if r := g.targets[k]; r.Value != "" {
			fmt.Fprintf(&b, "%s %d %s\n", k, r.MS, r.Value)
		} else {
			fmt.Fprintf(&b, "%s %d\n", k, r.MS)
		}
	}
	return b.Bytes()
}

// each calls fn for every "key ms [value]" line of b, skipping comments.
// Keys and values hold no ASCII blanks (names and message ids are escaped,
// see escape and messageKey; release versions are checked before they get
// here). Only those separate
// fields, never Unicode white space as strings.Fields would: a name kept
// as it is may hold U+00A0, U+0085, U+2028, U+3000 or invalid UTF-8, and
// must stay one field. Lines have no length limit.
func each(b []byte, fn func(key string, ms int64, value string)) error {
	for n := 1; len(b) > 0; n++ {
		var raw []byte
		raw, b, _ = bytes.Cut(b, []byte("\n"))
		line := strings.Trim(string(raw), blanks)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.FieldsFunc(line, isBlank)
		if len(f) < 2 || len(f) > 3 {
			return fmt.Errorf("line %d: want \"<key> <unix ms> [value]\", got %q", n, line)
		}
		ms, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("line %d: want \"<key> <unix ms> [value]\", got %q", n, line)
		}
		value := ""
		if len(f) == 3 {
			value = f[2]
		}
		fn(f[0], ms, value)
	}
	return nil
}

// blanks are the ASCII white space bytes, all of which escape() writes as
// %XX, so none is ever part of a name.
const blanks = " \t\n\v\f\r"

func isBlank(r rune) bool { return r < utf8.RuneSelf && strings.ContainsRune(blanks, r) }
