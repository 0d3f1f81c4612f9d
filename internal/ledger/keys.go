package ledger

import (
	"fmt"
	"strings"
)

// The targets. A tenant's existence (onboarding, offboarding) and its
// release (onboarding, deployment) are kept apart, so that a deployment of
// the tier does not make an earlier-sent offboarding stale: the outcome is
// the one the messages would have in the order they were sent.

// Tenant is whether a tenant exists.
func Tenant(id string) string { return "tenant/" + escape(id) }

// Release is a tenant's release, as versions before ReleaseIn wrote it:
// read where ReleaseIn has no record yet.
func Release(id string) string { return "release/" + escape(id) }

// ReleaseIn is a tenant's release in one tier: a deployment of the tier it
// left (or of one it never was in) does not touch its release in another.
// A deployment held for the onboarding sent before it keeps its release as
// the value.
func ReleaseIn(tier, id string) string { return "release/" + escape(tier) + "/" + escape(id) }

// Env is a pooled environment's release. Its name comes from a file name
// that someone wrote by hand, which may hold blanks.
func Env(name string) string { return "env/" + escape(name) }

// Tier is a tier's last deployment, whose release a tenant onboarded by a
// message sent before it takes.
func Tier(name string) string { return "tier/" + escape(name) }

// HeldIn is an onboarding to tier held until the offboarding that moves
// the tenant out of its current tier arrives; the value is its release.
func HeldIn(tier, id string) string { return "held/" + escape(tier) + "/" + escape(id) }

// Log is one message about tenant id, key its MessageKey: the value
// says what it asked (see internal/gitops, which reads and writes these),
// the send time is its own. A tenant's messages and its Base are one
// group file, read whole by Scan(LogPrefix(id)).
func Log(id, key string) string { return LogPrefix(id) + key }

// LogPrefix is what every Log key of tenant id starts with.
func LogPrefix(id string) string { return "log/" + escape(id) + "/" }

// Base is what tenant id was after the messages its Log no longer holds
// (folded, once older than the queues' retention).
func Base(id string) string { return "base/" + escape(id) }

// TierLog is one deployment of a whole tier, key its MessageKey: the value
// is its release. A tier's deployments share the group of Tier(tier).
func TierLog(tier, key string) string { return TierLogPrefix(tier) + key }

// TierLogPrefix is what every TierLog key of tier starts with.
func TierLogPrefix(tier string) string { return "tierlog/" + escape(tier) + "/" }

// Hold is the index entry of a held message about tenant id, key its
// MessageKey, so that its hold can be ended without reading every
// tenant's record: every Hold is one group file, read by
// Scan(HoldPrefix).
func Hold(id, key string) string { return HoldsOf(id) + key }

// HoldsOf is what every Hold key of tenant id starts with.
func HoldsOf(id string) string { return HoldPrefix + escape(id) + "/" }

// HoldPrefix is what every Hold key starts with.
const HoldPrefix = "hold/"

// EarlierHoldsIndexed is the record, among the holds, that says the held
// messages an earlier version recorded (HeldIn, and ReleaseIn with a
// value) were looked for once in the whole ledger and put in the index.
const EarlierHoldsIndexed = HoldPrefix + "earlier-versions-indexed"

// EarlierHold is the tenant whose held message target records, when it is
// an earlier version's record of one (HeldIn, or ReleaseIn with value).
func EarlierHold(target string, value string) (string, bool) {
	kind, rest, _ := strings.Cut(target, "/")
	if kind != "held" && !(kind == "release" && value != "" && strings.Contains(rest, "/")) {
		return "", false
	}
	return unescape(rest[strings.LastIndexByte(rest, '/')+1:]), true
}

// durable reports whether target is a record that Prune keeps whatever
// its age: a tenant's messages and base, a tier's deployments and the
// holds are compacted by whoever writes them (internal/gitops), which
// folds what it lets go into the tenant's base; dropped as they age they
// would take what they decided with them.
func durable(target string) bool {
	kind, _, _ := strings.Cut(target, "/")
	switch kind {
	case "log", "base", "tierlog", "hold":
		return true
	}
	return false
}

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

// MessageKey is message id as the ledger's files hold it: one field, the
// same for the same id (see messageKey).
func MessageKey(id string) string { return messageKey(id) }

// messageKey is message id as a group file holds it: escaped as names
// are, and "#" at its start (a comment's mark) and the empty id escaped
// too, so that any id an SQS-compatible server sends is one field that
// reads back as itself. SQS's own ids (UUIDs) are kept as they are.
func messageKey(id string) string {
	switch k := escape(id); {
	case k == "":
		return "%" // escape() writes "%" only before two hex digits
	case k[0] == '#':
		return "%23" + k[1:]
	default:
		return k
	}
}

func needsEscape(r rune) bool { return r <= ' ' || r == '%' || r == 0x7f }

// canonical is the key that Tenant, Env and the other key functions give
// for the name a key read from a file holds (their prefixes, "env/" and
// the like, hold nothing escape() changes, so the whole key can be escaped
// at once).
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
