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

// bucket is the four hex digits that name a group: the first two bytes of
// the sha256 of name (65,536 groups).
func bucket(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:2])
}

// groupName is what a target's group is chosen by: the tenant its key is
// about (the id, the last field of Tenant, Release, ReleaseIn and HeldIn),
// or for any other key (Env, Tier) the whole key. So the records one
// message leaves about one tenant (an onboarding's existence and release)
// share a file, and a batch of onboardings rewrites one file a tenant,
// not two. Any name, of any form, gives one group: a key read from a file
// goes where Set would put it.
func groupName(target string) string {
	kind, rest, ok := strings.Cut(target, "/")
	switch {
	case !ok:
		return target
	case kind == "tenant" || kind == "base":
		return rest
	case kind == "release" || kind == "held":
		return rest[strings.LastIndexByte(rest, '/')+1:]
	case kind == "log":
		id, _, _ := strings.Cut(rest, "/")
		return id
	case kind == "tierlog":
		tier, _, _ := strings.Cut(rest, "/")
		return "tier/" + tier
	case kind == "hold":
		return "holds"
	}
	return target
}

// targetPath is the group file that holds target, a key as written:
// named by its groupName's bucket, one folder level per hex digit,
// targets/<h0>/<h1>/<h2>/<h3>, so that every tree a record's path rewrites
// holds at most 16 entries however many targets the ledger holds.
func targetPath(target string) string {
	return digitsPath(bucket(groupName(target)))
}

// homeDigit is the journal folder of the targets whose group is at p (a
// targetPath), and whether p is one: a former two-level path is no
// target's own.
func homeDigit(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, targetsDir+"/")
	if !ok || strings.Count(rest, "/") != 3 {
		return "", false
	}
	return rest[:1], true
}

// earlierTargetPaths are where earlier versions kept the same record,
// both named by the bucket of the whole key, so that a tenant's records
// were in several files: keyed, in the same folders, by versions from
// 2026-12-05 to 2026-12-06; former, at targets/<h0h1>/<h2h3>, two levels
// of 256 whose folders grew with the targets (160 entries at 21,000
// tenants) and were rewritten by every record, by versions before
// 2026-12-05. The former names (two hex digits) are not those of
// targetPath's first level (one), so both fit one targets folder while
// the records move. Set moves a record it changes from there to
// targetPath.
func earlierTargetPaths(target string) (keyed, former string) {
	b := bucket(target)
	return digitsPath(b), targetsDir + "/" + b[:2] + "/" + b[2:]
}

// digitsPath is the file of group b (four hex digits) under targets/.
func digitsPath(b string) string {
	return targetsDir + "/" + b[:1] + "/" + b[1:2] + "/" + b[2:3] + "/" + b[3:]
}

// targetHeader is the first line of the targets group file at p, which
// holds keys: what it says of them is true of each.
func targetHeader(p string, keys []string) string {
	digits := strings.ReplaceAll(strings.TrimPrefix(p, targetsDir+"/"), "/", "")
	const fields = ": key, send time (Unix ms, SQS SentTimestamp) of the last message applied to it, value"
	if strings.Count(p, "/") == 2 {
		return "# tenant-worker ledger: targets whose key's sha256 starts " + digits + ", as versions before 2026-12-05 kept them" + fields
	}
	h := "# tenant-worker ledger: targets whose tenant's id (or, for a tier or an environment, whole key) has a sha256 starting " + digits
	if slices.ContainsFunc(keys, func(k string) bool { return targetPath(k) != p }) {
		h += ", and targets whose whole key's does, as versions from 2026-12-05 to 2026-12-06 kept them"
	}
	return h + fields
}

// A message's group is found from its send time (SQS SentTimestamp, which
// a redelivered message carries unchanged): the ids sent within one span
// of time share a file, so that a backlog drained in the order it was sent
// adds each batch's ids to the few files of its own moments, not to files
// that every batch rewrites, fuller each time. A span's file takes
// groupLimit ids; the next messages of that span go to the finer span
// inside it:
//
//	messages/<hour>/<MM><SS>          15 seconds from minute MM, second SS (00, 15, 30 or 45)
//	messages/<hour>/m<MM>/s<SS>       one second, once its 15 seconds' file is full
//	messages/<hour>/m<MM>/t<SS>/<cc>  10 milliseconds from hundredth cc, once its second's file is full (no limit)
//
// A day of 1,000,000 ids (11.6 a second) holds about 170 a window and
// stays in 240 window files an hour (the hash groups before made 256); a
// group per minute and hash for every message was tried and refused
// (340,000 files a day, p50 4.7x). Sent faster than about 17 a second, a
// window fills and its seconds take the rest; faster than 256 a second,
// its hundredths. A file holds at most groupLimit ids unless more than that
// many messages were sent within 10 milliseconds (25,600 a second). The
// cost of a commit stays bounded whatever the rate; the number of files
// does not: above 256 messages sent a second, each second of sending adds
// up to 100 files (21,000 sent at 1,000 a second leave about 2,000 files
// of 7 ids, where the hash groups left about 512), until the hour is
// pruned.
//
// Versions before 2026-12-06 grouped ids by hour and the first byte of the
// id's hash, messages/<hour>/<h0h1>, and once that held 256 ids by minute
// and hash, messages/<hour>/m<MM>/<h0h1>. Those files are read too, never
// written: they go when their hour is pruned. Their names (two hex digits)
// are none of the above's.
const groupLimit = 256

// windowSeconds is a window group's span.
const windowSeconds = 15

// span is how fine a message group's span of send time is.
type span int

const (
	windowSpan       span = iota // messages/<hour>/<MM><SS>
	secondSpan                   // messages/<hour>/m<MM>/s<SS>
	hundredthSpan                // messages/<hour>/m<MM>/t<SS>/<cc>
	formerHourSpan               // messages/<hour>/<h0h1>: read only
	formerMinuteSpan             // messages/<hour>/m<MM>/<h0h1>: read only
)

// written are the spans Note writes, coarsest first; read, every span Seen
// reads.
var (
	written = []span{windowSpan, secondSpan, hundredthSpan}
	read    = []span{windowSpan, secondSpan, hundredthSpan, formerHourSpan, formerMinuteSpan}
)

// moment splits a send time (Unix ms) into its hour folder and the
// minute, second and millisecond within that hour.
func moment(sent int64) (hour string, mm, ss, ms int64) {
	hour, start := hourOf(sent)
	in := sent - start
	return hour, in / 60_000, in / 1000 % 60, in % 1000
}

// messageGroupPath is the file of span s that holds message id, sent at
// sent (Unix ms).
func messageGroupPath(id string, sent int64, s span) string {
	h, mm, ss, ms := moment(sent)
	dir := messagesDir + "/" + h
	switch s {
	case windowSpan:
		return fmt.Sprintf("%s/%02d%02d", dir, mm, ss-ss%windowSeconds)
	case secondSpan:
		return fmt.Sprintf("%s/m%02d/s%02d", dir, mm, ss)
	case hundredthSpan:
		return fmt.Sprintf("%s/m%02d/t%02d/%02d", dir, mm, ss, ms/10)
	case formerHourSpan:
		return dir + "/" + hourBucket(id)
	default:
		return fmt.Sprintf("%s/m%02d/%s", dir, mm, hourBucket(id))
	}
}

// spanText is what a message group holds, for its header: the span of
// send times of its kind that sent falls in (a former group, never
// written, by its file's name).
func spanText(kind span, sent int64, name string) string {
	h, mm, ss, ms := moment(sent)
	switch kind {
	case windowSpan:
		w := ss - ss%windowSeconds
		return fmt.Sprintf("the hour %s UTC, minute %02d, seconds %02d-%02d", h, mm, w, w+windowSeconds-1)
	case secondSpan:
		return fmt.Sprintf("the hour %s UTC, minute %02d, second %02d", h, mm, ss)
	case hundredthSpan:
		return fmt.Sprintf("the hour %s UTC, minute %02d, second %02d, milliseconds %03d-%03d", h, mm, ss, ms-ms%10, ms-ms%10+9)
	case formerHourSpan:
		return fmt.Sprintf("the hour %s UTC, whose id's sha256 starts %s", h, name)
	default:
		return fmt.Sprintf("the hour %s UTC, minute %02d, whose id's sha256 starts %s", h, mm, name)
	}
}

// hourBucket is the first two hex digits of the sha256 of a message id:
// its group within an hour or a minute before 2026-12-06.
func hourBucket(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:1])
}

// hourOf is the hour folder of a message sent at sent (Unix ms), and the
// hour's start.
func hourOf(sent int64) (name string, start int64) {
	t := time.UnixMilli(sent).UTC().Truncate(time.Hour)
	return t.Format(hourForm), t.UnixMilli()
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
	targets map[string]Record // a targets group
	ids     map[string]int64  // a messages group: id -> send time
	kind    span              // a messages group: the span of send times it holds
	sent    int64             // a messages group: a send time (Unix ms) in that span
	existed bool              // the tree holds the file
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
	r := Record{MS: ms, Value: value}
	if last, ok := records[target]; ok && !newer(r, last) {
		return false
	}
	records[target] = r
	return true
}

// newer reports whether r, met after last, takes its place: it was sent
// later, or at the same time with another value (equal send times take
// effect in the order they are met).
func newer(r, last Record) bool {
	return r.MS > last.MS || r.MS == last.MS && r.Value != last.Value
}

// render is the group's file: a header, then one line per record, sorted,
// so that a change edits one line (and a targets group's header, when
// the last record there by its whole key leaves, see targetHeader). Nil
// when the group is empty.
func (g *group) render() []byte {
	var b bytes.Buffer
	if g.messages() {
		if len(g.ids) == 0 {
			return nil
		}
		fmt.Fprintf(&b, "# tenant-worker ledger: messages applied, sent in %s: id, send time (Unix ms, SQS SentTimestamp)\n",
			spanText(g.kind, g.sent, path.Base(g.path)))
		for _, id := range slices.Sorted(maps.Keys(g.ids)) {
			fmt.Fprintf(&b, "%s %d\n", id, g.ids[id])
		}
		return b.Bytes()
	}
	if len(g.targets) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(g.targets))
	b.WriteString(targetHeader(g.path, keys) + "\n")
	for _, k := range keys {
		writeRecord(&b, k, g.targets[k])
	}
	return b.Bytes()
}

// writeRecord writes target's record as a "key ms [value]" line.
func writeRecord(b *bytes.Buffer, target string, r Record) {
	if r.Value != "" {
		fmt.Fprintf(b, "%s %d %s\n", target, r.MS, r.Value)
	} else {
		fmt.Fprintf(b, "%s %d\n", target, r.MS)
	}
}

// each calls fn for every "key ms [value]" line of b, skipping comments.
func each(b []byte, fn func(key string, ms int64, value string)) error {
	return lines(b, func(f []string) bool {
		r, ok := fieldsRecord(f)
		if ok {
			fn(f[0], r.MS, r.Value)
		}
		return ok
	})
}

// fieldsRecord is the record of a "key ms [value]" line's fields.
func fieldsRecord(f []string) (Record, bool) {
	if len(f) < 2 || len(f) > 3 {
		return Record{}, false
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Record{}, false
	}
	r := Record{MS: ms}
	if len(f) == 3 {
		r.Value = f[2]
	}
	return r, true
}

// lines calls fn with the fields of every line of b but blank lines and
// comments, and fails at the first it refuses. Keys and values hold no
// ASCII blanks (names and message ids are escaped, see escape and
// messageKey; release versions are checked before they get here). Only
// those separate fields, never Unicode white space as strings.Fields
// would: a name kept as it is may hold U+00A0, U+0085, U+2028, U+3000 or
// invalid UTF-8, and must stay one field. Lines have no length limit.
func lines(b []byte, fn func(fields []string) bool) error {
	for n := 1; len(b) > 0; n++ {
		var raw []byte
		raw, b, _ = bytes.Cut(b, []byte("\n"))
		line := strings.Trim(string(raw), blanks)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !fn(strings.FieldsFunc(line, isBlank)) {
			return fmt.Errorf("line %d: want \"<key> <unix ms> [value]\", got %q", n, line)
		}
	}
	return nil
}

// blanks are the ASCII white space bytes, all of which escape() writes as
// %XX, so none is ever part of a name.
const blanks = " \t\n\v\f\r"

func isBlank(r rune) bool { return r < utf8.RuneSelf && strings.ContainsRune(blanks, r) }
