// Package ledger keeps what makes a late or repeated message harmless: for
// each tenant and pooled environment the SQS send time of the last message
// that took effect on it, and the ids of the messages applied within the
// queues' retention period.
//
// It is a tree of small text files, read from a snapshot of the commit a
// ref of its own points to (beside the branch Flux reads, and moved in the
// same push; internal/gitops does the git side). A commit changes a few of
// its files whatever the volume, and nothing is read but the files a
// message names, the journal folder of each of its records' first hex
// digit (at most 16 small files, see journalDir), and the earlier places
// of the expired records a prune drops (see Prune):
//
//	targets/<h0>/<h1>/<h2>/<h3>           "key ms [value]" lines, sorted by key
//	journal/<h0>/<seq>                    the same, "- " before a record dropped, of one push of many records
//	messages/<YYYYMMDDHH>/<MM><SS>        "id ms" lines, sorted by id, of 15 seconds' messages
//	messages/<YYYYMMDDHH>/m<MM>/s<SS>     the same of one second, once its 15 seconds' file is full
//	messages/<YYYYMMDDHH>/m<MM>/t<SS>/<cc> of 10 milliseconds, once its second's file is full
//
// A target's group is named by the first four hex digits of the sha256 of
// the tenant its key is about, as written (the id "t1" for Tenant("t1"),
// ReleaseIn("basic", "t1") and HeldIn("basic", "t1"), escaped as below), or
// of the whole key for a tier or an environment, so that an onboarding's
// records are one file; a
// message's by its send time (SQS SentTimestamp, which a redelivered
// message carries unchanged), UTC: its 15 seconds, and once that group
// holds groupLimit ids, its second, then its 10 milliseconds, so that a
// backlog's batch adds to the files of the moments its messages were sent
// in, not to files that every batch rewrites (see messageGroupPath). Each
// file starts with a one-line "# ..." comment saying what it holds.
// Pruning drops a whole hour folder once no message sent in that hour can
// still be delivered, and old target records from the groups a commit
// writes anyway.
//
// A push of many records (a batch of a backlog) puts them in the journal
// instead, a file per first hex digit of their groups, and merges one
// digit's journal into its groups: a target named in its digit's journal
// reads as its latest line there (see journalDir and Squash).
//
// Versions before 2026-12-05 kept a target's record at
// targets/<h0h1>/<h2h3> by the hash of its whole key, in folders of up to
// 256 entries that grew with the targets; versions until 2026-12-06 in the
// folders above, by the same hash, so that a tenant's records were in two
// files. A record is read from all three paths and, once Set changes it,
// lives in its own group alone (see places).
// Versions before 2026-12-06 grouped message ids by hour and hash
// (messages/<YYYYMMDDHH>/<h0h1>, then m<MM>/<h0h1>); those files are read
// until their hour is pruned, never written.
// Before that the ledger was two flat files in the GitOps tree
// (LegacyTargets, LegacyMessages); Import reads them once into this one.
package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
)

// ErrCorrupt is a group file that does not parse.
var ErrCorrupt = errors.New("corrupt ledger")

// IsCorrupt reports whether err is, or wraps, ErrCorrupt.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// Reader reads the ledger's tree (a snapshot of the ledger ref's commit):
// paths relative to the tree root.
type Reader interface {
	// ReadFile is a file's content: an error wrapping fs.ErrNotExist when absent.
	ReadFile(name string) ([]byte, error)
	// ReadDir is the entry names of a folder: fs.ErrNotExist when absent.
	ReadDir(name string) ([]string, error)
}

// Ledger is the ledger as one commit reads and changes it: each group is
// read on first use, at most once. It is not safe for concurrent use.
type Ledger struct {
	r        Reader
	groups   map[string]*group         // by path
	journals map[string]*journalFolder // by digit
	err      error

	// Prune's state: the hour folders of the tree (listed once), and the
	// bound below which every hour is forgotten.
	hours  []string
	listed bool
	pruned bool
	before int64
}

// Record is what the ledger holds of a target: the send time (Unix ms) of
// the last message applied to it, and for a tier the release it deployed.
type Record struct {
	MS    int64
	Value string
}

// Open is the ledger of the tree r reads; nil r is an empty ledger.
// Nothing is read until asked.
func Open(r Reader) *Ledger {
	return &Ledger{r: r, groups: map[string]*group{}, journals: map[string]*journalFolder{}}
}

// Err is the first error met reading a group: a read error, or a group
// that does not parse (wrapping ErrCorrupt); nil if none. A group that
// could not be read answers as empty and is never part of Changes, so that
// what it holds is not overwritten: a caller checks Err before it writes.
func (l *Ledger) Err() error { return l.err }

func (l *Ledger) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// load reads g, new to the cache, from the tree.
func (l *Ledger) load(g *group) *group {
	l.groups[g.path] = g
	if l.r != nil {
		g.existed = l.read(g, g.path)
	}
	return g
}

// read parses file name into g, and reports whether the tree holds it.
func (l *Ledger) read(g *group, name string) bool {
	b, err := l.r.ReadFile(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false
	case err != nil:
		g.broken = true
		l.fail(fmt.Errorf("read ledger %s: %w", name, err))
	default:
		if err := g.parse(b); err != nil {
			g.broken = true
			clear(g.targets)
			clear(g.ids)
			l.fail(fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err))
		}
	}
	return true
}

// targetGroup is the targets group file at p.
func (l *Ledger) targetGroup(p string) *group {
	if g, ok := l.groups[p]; ok {
		return g
	}
	return l.load(&group{path: p, targets: map[string]Record{}})
}

// places are the groups that may hold target's record: its own
// (targetPath) first, then those where earlier versions wrote it
// (earlierTargetPaths), which are read until Set moves the record. A
// replica of an earlier version still running may write there after a
// move: the newer record wins wherever it is, and of two with the same
// send time and different values, the earlier version's file's.
func (l *Ledger) places(target string) []*group {
	home := targetPath(target)
	gs := []*group{l.targetGroup(home)}
	if durable(target) {
		return gs // kinds no earlier version wrote: their own group alone
	}
	keyed, former := earlierTargetPaths(target)
	for _, p := range [...]string{keyed, former} {
		if p != home {
			gs = append(gs, l.targetGroup(p))
		}
	}
	return gs
}

// record is target's record, the newest of its places' (see places).
func record(target string, places []*group) (Record, bool) {
	var r Record
	var found bool
	for _, g := range places {
		if o, ok := g.targets[target]; ok && (!found || newer(o, r)) {
			r, found = o, true
		}
	}
	return r, found
}

// messageGroup is the group of span sp that holds message id, sent at
// sent (see messageGroupPath).
func (l *Ledger) messageGroup(id string, sent int64, sp span) *group {
	p := messageGroupPath(id, sent, sp)
	if g, ok := l.groups[p]; ok {
		return g
	}
	return l.load(&group{path: p, ids: map[string]int64{}, kind: sp, sent: sent})
}

// lookup is where target's record may be: its places (see places) and its
// group's journal folder.
func (l *Ledger) lookup(target string) ([]*group, *journalFolder) {
	gs := l.places(target)
	d, _ := homeDigit(gs[0].path)
	return gs, l.journalOf(d)
}

// Get returns target's record (see resolve).
func (l *Ledger) Get(target string) (Record, bool) {
	gs, j := l.lookup(target)
	return resolve(target, gs, j)
}

// resolve is target's record: its latest journal entry, if a journal file
// of j names it, or the newest of its places gs'. A record in its places
// sent after the journal's (which only a version before the journal
// writes there) is newer: it counts.
func resolve(target string, gs []*group, j *journalFolder) (Record, bool) {
	r, ok := record(target, gs)
	if e, named := j.latest(target); named && (!ok || r.MS <= e.r.MS) {
		if e.dropped {
			return Record{}, false
		}
		return e.r, true
	}
	return r, ok
}

// Stale reports whether a message sent at ms is older than the last change
// applied to target. Equal send times are not stale: such messages take
// effect in the order they are handled.
func (l *Ledger) Stale(target string, ms int64) bool {
	last, ok := l.Get(target)
	return ok && ms < last.MS
}

// Touch records that a message sent at ms took effect on target (no-op
// when the record is as new already).
func (l *Ledger) Touch(target string, ms int64) {
	l.Set(target, ms, "")
}

// Set records that a message sent at ms took effect on target with value,
// unless a newer one did.
//
// The record goes to target's own group, and leaves the groups where
// earlier versions kept it (see places) and the journal files that name
// it (see Squash). When a group or a journal file that may hold the
// record could not be read, nothing is recorded: Err says so.
func (l *Ledger) Set(target string, ms int64, value string) {
	gs, j := l.lookup(target)
	if j.broken || slices.ContainsFunc(gs, func(g *group) bool { return g.broken }) {
		return
	}
	next := Record{MS: ms, Value: value}
	if last, ok := resolve(target, gs, j); ok && !newer(next, last) {
		return
	}
	put(target, gs, j, entry{r: next})
}

// Delete takes target's record out of the ledger: its groups and its
// journal folder. When a file that may hold it could not be read, nothing
// is changed: Err says so.
func (l *Ledger) Delete(target string) {
	gs, j := l.lookup(target)
	if j.broken || slices.ContainsFunc(gs, func(g *group) bool { return g.broken }) {
		return
	}
	if _, ok := resolve(target, gs, j); ok {
		put(target, gs, j, entry{dropped: true})
	}
}

// Keyed is a target and its record.
type Keyed struct {
	Key string
	Record
}

// Scan lists, sorted by key, the records whose keys start with prefix, a
// prefix whose keys share one group (LogPrefix, TierLogPrefix,
// HoldPrefix): that group's file and its journal folder are all it reads.
func (l *Ledger) Scan(prefix string) []Keyed {
	home := l.targetGroup(targetPath(prefix))
	d, _ := homeDigit(home.path)
	j := l.journalOf(d)
	keys := map[string]bool{}
	for k := range home.targets {
		if strings.HasPrefix(k, prefix) {
			keys[k] = true
		}
	}
	for _, k := range j.homedAt(home.path) {
		if strings.HasPrefix(k, prefix) {
			keys[k] = true
		}
	}
	var out []Keyed
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if r, ok := resolve(k, []*group{home}, j); ok {
			out = append(out, Keyed{Key: k, Record: r})
		}
	}
	return out
}

// put makes e target's record in its groups gs (its places) whatever they
// hold: in its own, the first, unless e is dropped, and in no other; and
// takes it out of its journal folder j.
func put(target string, gs []*group, j *journalFolder, e entry) {
	j.forget(target)
	for i, g := range gs {
		if i == 0 && !e.dropped {
			g.targets[target] = e.r
			g.dirty = true
		} else if _, ok := g.targets[target]; ok {
			delete(g.targets, target)
			g.dirty = true
		}
	}
}

// Seen reports whether message id, sent at sent (its SQS SentTimestamp,
// Unix ms), was applied within the retention period. It reads the groups
// of that moment, from the coarsest span to the finest, and those of its
// hour and id that versions before 2026-12-06 wrote.
func (l *Ledger) Seen(id string, sent int64) bool {
	if l.expired(sent) {
		return false
	}
	key := messageKey(id)
	// Every span is read whatever the coarser ones hold: a hand edit or a
	// revert may have taken ids out of a full group, and what went to the
	// finer spans must still be found. An absent file costs a lookup in
	// the tree.
	for _, sp := range read {
		if ms, ok := l.messageGroup(id, sent, sp).ids[key]; ok && ms == sent {
			return true
		}
	}
	return false
}

// Note records that message id, sent at sent, was applied: in the group of
// its 15 seconds, or once that holds groupLimit ids, of its second, or
// once that does too, of its 10 milliseconds. A message sent in an hour Prune
// dropped cannot be delivered again: nothing is recorded.
func (l *Ledger) Note(id string, sent int64) {
	if l.expired(sent) || l.Seen(id, sent) {
		return
	}
	var g *group
	for i, sp := range written {
		g = l.messageGroup(id, sent, sp)
		if g.broken {
			return // Err says so; what the group holds is not overwritten
		}
		if i == len(written)-1 || len(g.ids) < groupLimit {
			break
		}
	}
	g.ids[messageKey(id)] = sent
	g.dirty = true
}

// Prune forgets what no message still deliverable could need: what is
// older than before (now less the queues' retention period; a message sent
// before it can no longer be delivered). It deletes every hour folder of
// messages that ends by before (one listing of messages/, read once), and
// drops records older than before from the groups of targets changed
// already, which are written anyway: call it once the commit's changes are
// made. It reads no other group but the earlier places of the records it
// drops (see places: a copy there goes too, and its group is written and
// pruned in turn; a corrupt file there is an error, as for a message's own
// records), and no other file but the journal folder of each group it
// prunes and of each record it drops (the record of a target whose group
// that is goes from the journal too, as it would from the group had a
// batch written it there),
// and prunes nothing else, so that a commit stays small; records of
// targets that no commit touches stay until one does. Only two versions
// writing one ledger (replicas during a rollout, a rollback and forward
// again) or a hand edit leave copies at earlier places: Set takes a record
// out of its other places, and so does Squash.
func (l *Ledger) Prune(before int64) {
	var work []*group
	for _, g := range l.groups {
		if g.dirty && !g.messages() {
			work = append(work, g)
		}
	}
	// drop takes k's copies older than before out of its places but g,
	// whose own are dropped already: left alone, one would answer for k
	// again (a replica of an earlier version wrote both). Each group is
	// written, and pruned. Its journal line goes too when as old, and its
	// own group is pruned: a batch wrote the line there instead of in
	// that group, which would have been written.
	drop := func(k string, g *group) {
		gs, f := l.lookup(k)
		prune := func(o *group) {
			if !o.dirty {
				o.dirty = true
				work = append(work, o)
			}
		}
		for _, o := range gs {
			if c, ok := o.targets[k]; ok && o != g && c.MS < before {
				delete(o.targets, k)
				prune(o)
			}
		}
		if expiredLine(f, k, before) {
			f.forget(k)
			prune(gs[0])
		}
	}
	for len(work) > 0 {
		g := work[len(work)-1]
		work = work[:len(work)-1]
		for k, r := range g.targets {
			if r.MS >= before || durable(k) {
				continue
			}
			delete(g.targets, k)
			drop(k, g)
		}
		// The records of g's targets that a journal holds go as they
		// would from g: a batch wrote them there instead.
		if d, ok := homeDigit(g.path); ok {
			f := l.journalOf(d)
			for _, k := range f.homedAt(g.path) {
				if !durable(k) && expiredLine(f, k, before) {
					drop(k, g)
				}
			}
		}
	}
	if !l.pruned || before > l.before {
		l.pruned, l.before = true, before
	}
	if l.listed || l.r == nil {
		return
	}
	l.listed = true
	hours, err := l.r.ReadDir(messagesDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.fail(fmt.Errorf("list ledger %s: %w", messagesDir, err))
		return
	}
	l.hours = hours
}

// expiredLine reports whether k's latest line in f is a record older than
// before: Prune drops it (a copy in a group sent later, which only a
// version before the journal writes, is kept if not as old).
func expiredLine(f *journalFolder, k string, before int64) bool {
	e, ok := f.latest(k)
	return ok && !e.dropped && e.r.MS < before
}

// expired reports whether a message sent at sent falls in an hour Prune
// dropped.
func (l *Ledger) expired(sent int64) bool {
	if !l.pruned {
		return false
	}
	_, start := hourOf(sent)
	return l.expiredHour(start)
}

func (l *Ledger) expiredHour(start int64) bool {
	return l.pruned && start+hourMS <= l.before
}

// Changes is what to write to the tree for every change since Open: path
// to new content of each group changed, nil to delete a path (a file, or a
// whole hour folder Prune dropped). A commit of them touches a handful of
// small files, whatever the ledger holds.
func (l *Ledger) Changes() map[string][]byte {
	c := map[string][]byte{}
	for _, h := range l.hours {
		if start, ok := hourStart(h); ok && l.expiredHour(start) {
			c[messagesDir+"/"+h] = nil
		}
	}
	for p, g := range l.groups {
		if !g.dirty || g.broken || g.messages() && l.expired(g.sent) {
			continue
		}
		if b := g.render(); b != nil {
			c[p] = b
		} else if g.existed {
			c[p] = nil
		}
	}
	for _, f := range l.journals {
		for _, jf := range f.files {
			if !jf.dirty || f.broken {
				continue
			}
			if b := renderJournal(jf.entries); b != nil {
				c[jf.path] = b
			} else if jf.existed {
				c[jf.path] = nil
			}
		}
	}
	return c
}

// Walk calls fn for the key of every target record the ledger holds, in
// its groups (at every path a version wrote them) and in its journal,
// each key once, in no order. It reads every file of targets/ and
// journal/: a task done once (the worker's own records are found by
// Scan), such as finding the records of an earlier version.
func (l *Ledger) Walk(fn func(target string)) error {
	if l.r == nil {
		return nil
	}
	seen := map[string]bool{}
	visit := func(k string) {
		if !seen[k] {
			seen[k] = true
			fn(k)
		}
	}
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		names, err := l.r.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list ledger %s: %w", dir, err)
		}
		for _, n := range names {
			p := dir + "/" + n
			// targets/<h>/<h>/<h>/<h> and targets/<hh>/<hh>: files at
			// four levels of one digit or two of two.
			if depth == 4 || depth == 2 && len(n) == 2 && len(strings.TrimPrefix(dir, targetsDir+"/")) == 2 {
				for k := range l.targetGroup(p).targets {
					visit(k)
				}
				continue
			}
			if err := walk(p, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(targetsDir, 1); err != nil {
		return err
	}
	for _, d := range digits {
		for _, jf := range l.journalOf(string(d)).files {
			for k := range jf.entries {
				visit(k)
			}
		}
	}
	return l.err
}
