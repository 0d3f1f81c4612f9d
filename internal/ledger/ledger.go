// Package ledger keeps, in the GitOps repository itself, what makes a late
// or repeated message harmless: for each tenant and pooled environment the
// SQS send time of the last message that took effect on it, and the ids of
// the messages applied within the queues' retention period.
//
// It lives in the tree, beside what it describes, so every commit moves the
// two together: it survives compaction of the clone, restarts with a memory
// or disk clone, and several replicas (each push is a compare-and-swap of
// both), and it reaches back as far as SQS can still deliver a message.
// Flux never reads it: the files have no .yaml suffix and sit outside the
// folders its Kustomizations build.
package ledger

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Files, relative to the layout's root.
const (
	Dir          = ".tenant-worker"
	TargetsFile  = Dir + "/targets"
	MessagesFile = Dir + "/messages"
)

const (
	targetsHeader = "# tenant-worker: send time (Unix ms, SQS SentTimestamp) of the last message applied to each\n" +
		"# tenant and pooled environment. A message sent earlier changes nothing of it. Written by tenant-worker.\n"
	messagesHeader = "# tenant-worker: messages applied in the queues' retention period (id, send time in Unix ms),\n" +
		"# oldest first; a redelivered one is recognised here. Written by tenant-worker.\n"
)

// Ledger is the parsed pair of files.
type Ledger struct {
	targets  map[string]Record
	messages map[string]int64
	order    []string // message ids, oldest first, as written
}

// Record is what the ledger holds of a target: the send time (Unix ms) of
// the last message applied to it, and for a tier the release it deployed.
type Record struct {
	MS    int64
	Value string
}

// Parse reads the two files; a missing one (nil) is empty.
func Parse(targets, messages []byte) (*Ledger, error) {
	l := &Ledger{targets: map[string]Record{}, messages: map[string]int64{}}
	if err := each(targets, func(key string, ms int64, value string) {
		// Two lines may name one target in its two forms (see canonical):
		// the newer record is the one that counts, as Set decides.
		l.Set(canonical(key), ms, value)
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", TargetsFile, err)
	}
	if err := each(messages, func(key string, ms int64, _ string) {
		if _, ok := l.messages[key]; !ok {
			l.order = append(l.order, key)
		}
		l.messages[key] = ms
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", MessagesFile, err)
	}
	return l, nil
}

// each calls fn for every "key ms [value]" line of b, skipping comments.
// Keys and values hold no ASCII blanks (names are escaped; message ids and
// release versions are checked before they get here). Only those separate
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

// The targets. A tenant's existence (onboarding, offboarding) and its
// release (onboarding, deployment) are kept apart, so that a deployment of
// the tier does not make an earlier-sent offboarding stale: the outcome is
// the one the messages would have in the order they were sent.

// Tenant is whether a tenant exists.
func Tenant(id string) string { return "tenant/" + escape(id) }

// Release is a tenant's release.
func Release(id string) string { return "release/" + escape(id) }

// Env is a pooled environment's release. Its name comes from a file name
// that someone wrote by hand, which may hold blanks.
func Env(name string) string { return "env/" + escape(name) }

// Tier is a tier's last deployment, whose release a tenant onboarded by a
// message sent before it takes.
func Tier(name string) string { return "tier/" + escape(name) }

// escape keeps a name to one field of a line: ASCII blanks and control
// bytes, "%" and DEL are written as %XX; every other byte, Unicode white
// space and invalid UTF-8 among them, is kept as it is (each splits fields
// at ASCII blanks only). Names without such bytes are kept as they are, so
// the files written before stay valid; see canonical for the others.
func escape(name string) string {
	if !strings.ContainsFunc(name, needsEscape) {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if c := name[i]; needsEscape(rune(c)) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func needsEscape(r rune) bool { return r <= ' ' || r == '%' || r == 0x7f }

// canonical is the key that Tenant, Env and the other key functions give
// for the name a key read from the targets file holds (their prefixes,
// "env/" and the like, hold nothing escape() changes, so the whole key can
// be escaped at once).
//
// Files written before escaping was added hold names as they were: "%",
// control bytes and DEL included ("env/pool%1" for pool%1.yaml, where Env
// now gives "env/pool%251"). Such a record must still be found, or a late
// message is no longer stale. So unescape reads back exactly what escape()
// writes and takes any other byte as itself, and the key is escaped again;
// the next write gives the line its current form.
//
// The rule for the one ambiguous case: an old name that itself held a
// sequence escape() writes ("%20", "%25", "%0A", "%7F": "%" and two
// upper-case hex digits of a byte escape() escapes) is read as escaped
// ("env/pool%20a" is pool a, not pool%20a), because files the current
// version writes must read back exactly, and that version is the only one
// that could write a blank at all. Any other "%" ("%1", "%zz", "%41",
// "%0a") was never written by escape() and is read as itself.
func canonical(key string) string { return escape(unescape(key)) }

// unescape is the inverse of escape: unescape(escape(s)) == s for every
// byte string s. It also accepts what escape() never writes (see canonical).
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c, ok := escaped(s[i:]); ok {
			b.WriteByte(c)
			i += 2
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// escaped reports whether s starts with what escape() writes for a byte,
// and which byte.
func escaped(s string) (byte, bool) {
	const hex = "0123456789ABCDEF" // escape() writes %02X
	if len(s) < 3 || s[0] != '%' {
		return 0, false
	}
	hi, lo := strings.IndexByte(hex, s[1]), strings.IndexByte(hex, s[2])
	if hi < 0 || lo < 0 {
		return 0, false
	}
	c := byte(hi<<4 | lo)
	return c, needsEscape(rune(c))
}

// Get returns target's record.
func (l *Ledger) Get(target string) (Record, bool) {
	r, ok := l.targets[target]
	return r, ok
}

// Stale reports whether a message sent at ms is older than the last change
// applied to target. Equal send times are not stale: such messages take
// effect in the order they are handled.
func (l *Ledger) Stale(target string, ms int64) bool {
	last, ok := l.targets[target]
	return ok && ms < last.MS
}

// Seen reports whether message id was applied within the retention period.
func (l *Ledger) Seen(id string) bool {
	_, ok := l.messages[id]
	return ok
}

// Touch records that a message sent at ms took effect on target (no-op
// when the record is as new already).
func (l *Ledger) Touch(target string, ms int64) {
	l.Set(target, ms, "")
}

// Set records that a message sent at ms took effect on target with value,
// unless a newer one did.
func (l *Ledger) Set(target string, ms int64, value string) {
	if last, ok := l.targets[target]; !ok || ms > last.MS || (ms == last.MS && value != last.Value) {
		l.targets[target] = Record{MS: ms, Value: value}
	}
}

// Note records that message id, sent at ms, was applied.
func (l *Ledger) Note(id string, ms int64) {
	if _, ok := l.messages[id]; !ok {
		l.order = append(l.order, id)
	}
	l.messages[id] = ms
}

// Prune forgets what no message still deliverable could need: records
// older than before (now less the queues' retention period; a message sent
// before it can no longer be delivered). To keep each commit's change small,
// it does so only once the oldest record is older than before by slack.
func (l *Ledger) Prune(before, slack int64) {
	oldest := before
	for _, r := range l.targets {
		oldest = min(oldest, r.MS)
	}
	for _, ms := range l.messages {
		oldest = min(oldest, ms)
	}
	if oldest > before-slack {
		return
	}
	maps.DeleteFunc(l.targets, func(_ string, r Record) bool { return r.MS < before })
	maps.DeleteFunc(l.messages, func(_ string, ms int64) bool { return ms < before })
	l.order = slices.DeleteFunc(l.order, func(id string) bool { _, ok := l.messages[id]; return !ok })
}

// Files returns the two files' contents: targets sorted by name, messages
// in the order they were noted (new ones at the end), so that one change
// edits a line or two of each.
func (l *Ledger) Files() (targets, messages []byte) {
	var t bytes.Buffer
	t.WriteString(targetsHeader)
	for _, k := range slices.Sorted(maps.Keys(l.targets)) {
		r := l.targets[k]
		if r.Value != "" {
			fmt.Fprintf(&t, "%s %d %s\n", k, r.MS, r.Value)
		} else {
			fmt.Fprintf(&t, "%s %d\n", k, r.MS)
		}
	}
	var m bytes.Buffer
	m.WriteString(messagesHeader)
	for _, id := range l.order {
		fmt.Fprintf(&m, "%s %d\n", id, l.messages[id])
	}
	return t.Bytes(), m.Bytes()
}

// Held is an onboarding held until the offboarding that moves the tenant
// out of its current tier arrives: "tier:release" of the onboarding.
func Held(id string) string { return "held/" + escape(id) }
