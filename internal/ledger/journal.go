package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The journal is where a push of many records puts them first (see
// Squash): one file a push for each first hex digit of their groups,
//
//	journal/<h0>/<seq>    "key ms [value]" lines, "- key ms [value]" for a record dropped
//
// seq being eight decimal digits, one more than the folder's last. A
// target's latest line in its digit's folder is its record (or, "-", the
// record it had was dropped), unless its groups hold a newer one (which
// only a version before the journal writes); a target no journal file
// names is read from its groups. Each push of many records then merges
// one digit's folder into its groups and deletes it, the fullest first.
//
// Records spread over 65,536 groups by hash: a push of 1,000 onboardings
// written to their groups rewrites some 900 of the 4,096 bottom folders
// and all 256 above them, and git's check on the server walks them again.
// In the journal the same push writes 16 files, and the merge writes one
// digit's groups, once for the records of up to 16 pushes: the folders a
// push rewrites fall to about 270, and what it writes stays the same from
// the 16th push of a backlog to the last.
const journalDir = "journal"

// journalSeqDigits is the width of a journal file's name.
const journalSeqDigits = 8

// entry is a journal line: a target's record, or that it was dropped
// (r.MS the dropped record's send time).
type entry struct {
	r       Record
	dropped bool
}

// journalFile is one file of a digit's journal folder.
type journalFile struct {
	path    string
	entries map[string]entry // shared with parsedJournals until dirty
	homes   homes            // shared with parsedJournals; read only
	existed bool
	dirty   bool
}

// homes are the targets a journal file names by their group's path
// (targetPath), so that Prune finds those of a group it prunes without
// hashing every line. A target taken out of the file may still be listed.
type homes map[string][]string

// homesOf are the homes of entries' targets.
func homesOf(entries map[string]entry) homes {
	h := homes{}
	for k := range entries {
		p := targetPath(k)
		h[p] = append(h[p], k)
	}
	return h
}

// parsedJournal is a journal file's content, parsed.
type parsedJournal struct {
	entries map[string]entry
	homes   homes
}

// journalFolder is one digit's folder: its files by name, oldest first.
type journalFolder struct {
	files  []*journalFile
	broken bool
}

// digit is the first hex digit of target's group: its journal folder's name.
func digit(target string) string {
	return bucket(groupName(target))[:1]
}

// fileIDer is a Reader that names a file's content (equal names for equal
// contents), so that a journal file read by many commits is parsed once.
type fileIDer interface {
	FileID(name string) (string, error)
}

// parsedJournals is every journal file parsed, by content id: each of a
// batch's messages opens the ledger again, and reads the same files.
var parsedJournals = struct {
	sync.Mutex
	m map[string]parsedJournal
}{m: map[string]parsedJournal{}}

// parsedJournalsMax bounds parsedJournals: 16 folders of 16 files, twice.
const parsedJournalsMax = 512

// journalOf is digit d's folder, read on first use.
func (l *Ledger) journalOf(d string) *journalFolder {
	if f, ok := l.journals[d]; ok {
		return f
	}
	f := &journalFolder{}
	l.journals[d] = f
	if l.r == nil {
		return f
	}
	dir := journalDir + "/" + d
	names, err := l.r.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f
	case err != nil:
		f.broken = true
		l.fail(fmt.Errorf("list ledger %s: %w", dir, err))
		return f
	}
	for _, name := range names {
		p := dir + "/" + name
		if !journalName(name) {
			f.broken = true
			l.fail(fmt.Errorf("%w: %s: not a journal file's name (%d decimal digits)", ErrCorrupt, p, journalSeqDigits))
			return f
		}
		parsed, err := l.readJournal(p)
		if err != nil {
			f.broken = true
			l.fail(err)
			return f
		}
		f.files = append(f.files, &journalFile{path: p, entries: parsed.entries, homes: parsed.homes, existed: true})
	}
	return f
}

// journalName reports whether name is a journal file's.
func journalName(name string) bool {
	return len(name) == journalSeqDigits && strings.Trim(name, "0123456789") == ""
}

// readJournal reads and parses the journal file p, once per content.
func (l *Ledger) readJournal(p string) (parsedJournal, error) {
	var id string
	if r, ok := l.r.(fileIDer); ok {
		if i, err := r.FileID(p); err == nil {
			id = i
			parsedJournals.Lock()
			parsed, ok := parsedJournals.m[id]
			parsedJournals.Unlock()
			if ok {
				return parsed, nil
			}
		}
	}
	b, err := l.r.ReadFile(p)
	if err != nil {
		return parsedJournal{}, fmt.Errorf("read ledger %s: %w", p, err)
	}
	m, err := parseJournal(b)
	if err != nil {
		return parsedJournal{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	parsed := parsedJournal{entries: m, homes: homesOf(m)}
	if id != "" {
		parsedJournals.Lock()
		if len(parsedJournals.m) >= parsedJournalsMax {
			clear(parsedJournals.m)
		}
		parsedJournals.m[id] = parsed
		parsedJournals.Unlock()
	}
	return parsed, nil
}

// parseJournal reads a journal file: "key ms [value]" lines, and "- key
// ms [value]" for a record dropped. Of two lines naming one target, the later counts.
func parseJournal(b []byte) (map[string]entry, error) {
	m := map[string]entry{}
	err := lines(b, func(f []string) bool {
		if len(f) > 1 && f[0] == "-" {
			r, ok := fieldsRecord(f[1:])
			if ok {
				m[canonical(f[1])] = entry{r: r, dropped: true}
			}
			return ok
		}
		r, ok := fieldsRecord(f)
		if ok {
			m[canonical(f[0])] = entry{r: r}
		}
		return ok
	})
	if err != nil {
		return nil, fmt.Errorf("%w (or \"- <key> <unix ms> [value]\")", err)
	}
	return m, nil
}

// renderJournal is a journal file of entries; nil when there are none.
func renderJournal(entries map[string]entry) []byte {
	if len(entries) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("# tenant-worker ledger: journal of a push, to be merged into targets/: key, send time (Unix ms, SQS SentTimestamp) of the last message applied to it, value; or -, then those of a record dropped\n")
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		e := entries[k]
		if e.dropped {
			b.WriteString("- ")
		}
		writeRecord(&b, k, e.r)
	}
	return b.Bytes()
}

// latest is target's latest journal entry, if a journal file names it.
func (f *journalFolder) latest(target string) (entry, bool) {
	for i := len(f.files) - 1; i >= 0; i-- {
		if e, ok := f.files[i].entries[target]; ok {
			return e, true
		}
	}
	return entry{}, false
}

// forget takes target out of every file of f: its groups hold its record
// now.
func (f *journalFolder) forget(target string) {
	for _, jf := range f.files {
		if _, ok := jf.entries[target]; !ok {
			continue
		}
		if !jf.dirty {
			jf.entries = maps.Clone(jf.entries) // the parsed map is shared
			jf.dirty = true
		}
		delete(jf.entries, target)
	}
}

// homedAt are the targets f names whose group is at p.
func (f *journalFolder) homedAt(p string) []string {
	var ks []string
	for _, jf := range f.files {
		for _, k := range jf.homes[p] {
			if _, ok := jf.entries[k]; ok && !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
	}
	return ks
}

// nextName is the name of the file after f's last.
func (f *journalFolder) nextName() string {
	next := 1
	if n := len(f.files); n > 0 {
		last, _ := strconv.Atoi(f.files[n-1].path[len(f.files[n-1].path)-journalSeqDigits:])
		next = last + 1
	}
	return fmt.Sprintf("%0*d", journalSeqDigits, next)
}
