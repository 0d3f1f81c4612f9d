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
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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
		l.targets[key] = Record{MS: ms, Value: value}
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
// Keys and values hold no spaces (tenant ids, file names, message ids and
// release versions are checked before they get here).
func each(b []byte, fn func(key string, ms int64, value string)) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
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
	return sc.Err()
}

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

// escape keeps a name to one field of a line: blanks, control bytes and
// "%" are written as %XX (names without them are kept as they are, so the
// files written before stay valid).
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
