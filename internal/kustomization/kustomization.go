// Package kustomization edits the resources list of a kustomization.yaml as
// text: entries are added and removed as a set and every other byte of the
// file (comments, spacing, a missing final newline) is left as it was.
package kustomization

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
)

var (
	// resourcesKey is the key of a block list, perhaps with an anchor.
	resourcesKey   = regexp.MustCompile(`^resources:[ \t]*(&[^ \t#]+[ \t]*)?(#.*)?$`)
	resourcesEmpty = regexp.MustCompile(`^resources:[ \t]*\[[ \t]*\][ \t]*(#.*)?$`)
)

// block locates the resources list in a file split into lines.
type block struct {
	key    int      // line of "resources:"; -1 when absent
	empty  bool     // written as "resources: []"
	items  []int    // lines of list items, in order
	values []string // entries, parallel to items, as the paths they name
	indent string   // indentation of the items ("  " when there are none)
	// end is the last line of a list the line editor does not edit in place
	// (a flow list, an alias, a tag, items with anchors or aliases, a key
	// written otherwise than "resources:"), or -1. Its extent and values
	// come from the YAML parser (see checkForm); an edit first rewrites it
	// in block style.
	end int
	// anchored: the key line puts an anchor on the list ("resources:
	// &list"), which another field may use through an alias. Such content
	// is checked on every read, verified before or not (see checkForm).
	anchored bool
}

// Normalize gives the path an entry names: "./t1.yaml" and "t1.yaml" are
// one file to kustomize, and so to the editor. Remote entries (a URL) are
// kept as written.
func Normalize(entry string) string {
	if entry == "" || strings.Contains(entry, "://") {
		return entry
	}
	return path.Clean(entry)
}

// Resources returns the entries of the top-level resources list. The
// caller must not modify the slice: the entries are cached.
func Resources(content []byte) ([]string, error) {
	p, err := read(content)
	return p.block.values, err
}

// Rest returns content without its resources list (the key and its
// entries), for a caller that needs the file's other settings: of a large
// file, without re-reading its entries.
func Rest(content []byte) ([]byte, error) {
	p, err := read(content)
	if err != nil {
		return nil, err
	}
	b := p.block
	if b.key < 0 {
		return content, nil
	}
	last := b.key
	if b.end >= 0 {
		last = b.end
	} else if n := len(b.items); n > 0 {
		last = b.items[n-1]
	}
	var sb strings.Builder
	for i, l := range p.lines {
		if i < b.key || i > last {
			sb.WriteString(l)
		}
	}
	return []byte(sb.String()), nil
}

// Contains reports whether the file entry names is in the resources list.
func Contains(content []byte, entry string) (bool, error) {
	values, err := Resources(content)
	return slices.Contains(values, Normalize(entry)), err
}

// parsed keeps the parse of the files read last, of every size: the
// kustomization of a tier with thousands of tenants is read by every
// message of the tier, and a shard folder's by every message of the shard
// and the checks of its commit. Reading a cached file costs its hash, not
// a parse that grows with its entries.
var parsed = newParseCache(parseCacheBytes)

// parseCacheBytes bounds the memory the parse cache holds (see size): the
// tiers of 10,000 tenants and hundreds of shard folders, a few versions of
// each.
const parseCacheBytes = 32 << 20

// parsedFile is a file split into lines and its resources list. Cached
// values are shared: callers that edit must copy (see edit).
type parsedFile struct {
	lines []string
	block block
}

// size is about what the cache holds for p: its lines and entries, their
// string headers and item lines, and the map entry and hash holding it.
func (p parsedFile) size() int {
	n := 128
	for _, l := range p.lines {
		n += len(l) + 16
	}
	for _, v := range p.block.values {
		n += len(v) + 16 + 8
	}
	return n
}

// read splits and parses content, from the cache when it was read before.
// A list it returns regular (block.end < 0) has been checked against the
// YAML parser: read checks what it has not seen, and caches only what
// passed.
func read(content []byte) (parsedFile, error) {
	sum := sha256.Sum256(content)
	if p, ok := parsed.get(sum); ok {
		return p, nil
	}
	lines := splitLines(content)
	b, err := parse(lines)
	if err != nil {
		return parsedFile{}, err
	}
	if !verified.has(sum) || b.end >= 0 || b.anchored {
		// Content first seen: what the line parser read must be what
		// kustomize reads, or the edit would change the list kustomize
		// builds in a way nobody asked for. An irregular list gets its
		// extent from the YAML parser there. A list with an anchor is
		// checked every time, whatever was verified: an alias of it in
		// another field would make an edit in place edit that field too.
		if b, err = checkForm(lines, b); err != nil {
			return parsedFile{}, err
		}
		if b.end < 0 {
			verified.add(sum)
		}
	}
	p := parsedFile{lines, b}
	parsed.put(sum, p)
	return p, nil
}

// edit is read for a caller that changes the lines or the entries: its
// copy shares nothing with the cache.
func edit(content []byte) ([]string, block, error) {
	p, err := read(content)
	if err != nil {
		return nil, block{}, err
	}
	b := p.block
	b.items, b.values = slices.Clone(b.items), slices.Clone(b.values)
	return slices.Clone(p.lines), b, nil
}

// parseCache keeps parsed files by content hash, the oldest forgotten
// first once they hold more than limit bytes.
type parseCache struct {
	mu    sync.Mutex
	limit int
	bytes int
	m     map[[32]byte]parsedFile
	order [][32]byte // oldest first
}

func newParseCache(limit int) *parseCache {
	return &parseCache{limit: limit, m: map[[32]byte]parsedFile{}}
}

func (c *parseCache) get(sum [32]byte) (parsedFile, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[sum]
	return p, ok
}

func (c *parseCache) put(sum [32]byte, v parsedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[sum]; ok {
		c.bytes -= old.size()
	} else {
		c.order = append(c.order, sum)
	}
	c.m[sum] = v
	c.bytes += v.size()
	for c.bytes > c.limit && len(c.order) > 1 {
		oldest := c.order[0]
		c.order = c.order[1:]
		c.bytes -= c.m[oldest].size()
		delete(c.m, oldest)
	}
}

// Add appends entry to the resources list unless the file it names is
// already there. It reports whether the content changed.
func Add(content []byte, entry string) ([]byte, bool, error) {
	lines, b, err := edit(content)
	if err != nil {
		return nil, false, err
	}
	if slices.Contains(b.values, Normalize(entry)) {
		return content, false, nil
	}
	// A regular list was checked by read: the line parser's reading of
	// content is kustomize's, so an edit of the list's own lines needs only
	// those lines checked. An irregular one is rewritten first, and the
	// whole edit is checked.
	rewritten := b.end >= 0
	if rewritten {
		lines, b = regular(lines, b)
	}
	item := b.indent + "- " + entry
	switch {
	case len(b.items) > 0:
		last := b.items[len(b.items)-1]
		lines = insertAfter(lines, last, item)
	case b.key >= 0:
		// "resources:" with no items, or "resources: []".
		if b.empty {
			lines[b.key] = "resources:" + lineEnding(lines[b.key])
		}
		lines = insertAfter(lines, b.key, item)
	default:
		if at := firstDocumentEnd(lines); at >= 0 {
			// Kustomize reads only the first document: the list goes at its end.
			nl := lineEnding(lines[at])
			if nl == "" {
				nl = "\n"
			}
			lines = slices.Insert(lines, at, "resources:"+nl, item+nl)
			break
		}
		if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
			lines[n-1] += "\n"
		}
		lines = append(lines, "resources:\n", item+"\n")
	}
	out := []byte(strings.Join(lines, ""))
	want := append(b.values, Normalize(entry))
	outSum := sha256.Sum256(out)
	if len(b.items) > 0 && !rewritten {
		// The file was checked as YAML before; the edit adds one line after
		// its last entry. Checking that line in that context is enough.
		last := b.items[len(b.items)-1]
		local := "resources:\n" + strings.TrimRight(lines[last], "\r\n") + "\n" + item + "\n"
		if err := verify([]byte(local), []string{b.values[len(b.values)-1], entry}); err != nil {
			return nil, false, err
		}
		verified.add(outSum)
		remember(outSum, lines, b, want)
		return out, true, nil
	}
	if err := checkEdit(content, out, want); err != nil {
		return nil, false, err
	}
	if !rewritten {
		// The list had no items: the line parser reads out as the new
		// line alone, kustomize's reading, just checked. (After a rewrite a
		// "resources:" line elsewhere may still fool it: the next read
		// checks again.)
		verified.add(outSum)
	}
	return out, true, nil
}

// remember caches the parse of the file Add wrote (lines, whose hash is
// sum), which appended the last of values after the last item of b, so
// that its next reader (the planner and the checks of the commit that
// holds it) does not parse it again. The new line is parsed on its own and must give that
// entry; on any doubt nothing is cached.
func remember(sum [32]byte, lines []string, b block, values []string) {
	last := b.items[len(b.items)-1]
	indent, value, ok := listItemOf(strings.TrimRight(lines[last+1], "\r\n"))
	if !ok || indent != b.indent || Normalize(unquote(withoutNote(value))) != values[len(values)-1] ||
		value != "" && strings.ContainsRune("&*[{", rune(value[0])) {
		// An anchor, an alias or a collection: parse reads the list as
		// irregular, which only the YAML parser may fill in.
		return
	}
	b.items = append(b.items, last+1)
	b.values = values
	parsed.put(sum, parsedFile{lines, b})
}

// Remove deletes every entry naming the file entry names from the
// resources list. It reports whether the content changed.
func Remove(content []byte, entry string) ([]byte, bool, error) {
	entry = Normalize(entry)
	return Filter(content, func(e string) bool { return e != entry })
}

// Filter keeps the entries of the resources list for which keep is true, in
// one pass. It reports whether the content changed.
func Filter(content []byte, keep func(entry string) bool) ([]byte, bool, error) {
	p, err := read(content)
	if err != nil {
		return nil, false, err
	}
	// keep is asked once per entry, in order: callers count with it.
	keeps := make([]bool, len(p.block.values))
	var kept []string
	for i, v := range p.block.values {
		if keeps[i] = keep(v); keeps[i] {
			kept = append(kept, v)
		}
	}
	if len(kept) == len(keeps) {
		return content, false, nil
	}
	rewritten := p.block.end >= 0 // a regular list was checked by read
	if rewritten {
		p.lines, p.block = regular(p.lines, p.block)
	}
	drop := make([]bool, len(p.lines))
	for i, k := range keeps {
		drop[p.block.items[i]] = !k
	}
	last := len(p.lines) - 1
	lastKept := -1
	if drop[last] && lineEnding(p.lines[last]) == "" {
		// The file had no final newline: the line that is now last loses
		// its own, so it still has none.
		for i := last; i >= 0; i-- {
			if !drop[i] {
				lastKept = i
				break
			}
		}
	}
	var sb strings.Builder
	for i, l := range p.lines {
		switch {
		case drop[i]:
		case i == lastKept:
			sb.WriteString(strings.TrimRight(l, "\r\n"))
		default:
			sb.WriteString(l)
		}
	}
	text := sb.String()
	out := []byte(text)
	outSum := sha256.Sum256(out)
	if !rewritten {
		// Whole entry lines left a list checked as YAML before: the rest of
		// the list, and of the file, means what it meant.
		verified.add(outSum)
		return out, true, nil
	}
	if err := checkEdit(content, out, kept); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

func parse(lines []string) (block, error) {
	b := block{key: -1, indent: "  ", end: -1}
	for i, l := range lines {
		text := strings.TrimRight(l, "\r\n")
		if i == 0 {
			text = strings.TrimPrefix(text, "\ufeff") // a byte order mark
		}
		if resourcesEmpty.MatchString(text) {
			b.key, b.empty = i, true
			return b, nil
		}
		if m := resourcesKey.FindStringSubmatch(text); m != nil {
			b.key, b.anchored = i, m[1] != ""
			break
		}
		if strings.HasPrefix(text, "resources:") {
			// A flow list, an alias, a tag: where it ends only the YAML
			// parser can tell (entries of a flow list may even start at
			// column 0), so checkForm sets its extent.
			b.key, b.end = i, i
			return irregular(lines, b)
		}
	}
	if b.key < 0 {
		return b, nil
	}
	for i := b.key + 1; i < len(lines); i++ {
		text := strings.TrimRight(lines[i], "\r\n")
		trimmed := strings.TrimSpace(text)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent, value, ok := listItemOf(text)
		if !ok {
			break
		}
		if len(b.items) == 0 {
			b.indent = indent
		} else if indent != b.indent {
			break
		}
		b.items = append(b.items, i)
		b.values = append(b.values, Normalize(unquote(withoutNote(value))))
		if value != "" && (value[0] == '&' || value[0] == '*' || value[0] == '[' || value[0] == '{') {
			b.end = i // an anchor, an alias or a nested collection
		}
	}
	if b.end >= 0 {
		b.end = b.items[len(b.items)-1]
		b.items, b.values = nil, nil
		return irregular(lines, b)
	}
	return b, nil
}

// irregular fills in the values of a list the line editor does not edit in
// place, as the YAML parser reads them.
func irregular(lines []string, b block) (block, error) {
	values, err := Listed([]byte(strings.Join(lines, "")))
	if err != nil {
		return b, fmt.Errorf("resources list: %w", err)
	}
	b.values = values
	return b, nil
}

// regular replaces the lines of an irregular list (b.key to b.end) with
// the same entries in block style, and returns the new lines and the list
// as the line editor edits it in place. Every other line is kept, and a
// byte order mark or a missing final newline with it; comments inside the
// list and its anchors go with the list (checkForm refuses a list with an
// anchor that another field uses).
func regular(lines []string, b block) ([]string, block) {
	nl := lineEnding(lines[b.key])
	if nl == "" {
		nl = "\n"
	}
	key := "resources:"
	if b.key == 0 && strings.HasPrefix(lines[0], "\ufeff") {
		key = "\ufeff" + key
	}
	out := make([]string, 0, len(lines)-(b.end-b.key)+len(b.values))
	out = append(out, lines[:b.key]...)
	r := block{key: len(out), indent: "  ", values: b.values, end: -1}
	out = append(out, key+nl)
	for _, v := range b.values {
		r.items = append(r.items, len(out))
		out = append(out, "  - "+v+nl)
	}
	if b.end == len(lines)-1 && lineEnding(lines[b.end]) == "" {
		out[len(out)-1] = strings.TrimRight(out[len(out)-1], "\r\n")
	}
	return append(out, lines[b.end+1:]...), r
}

// listItemOf splits a block-sequence line "<indent>- <value>" (the value
// without trailing blanks), as the regexp ^([ \t]*)-[ \t]+(.*?)[ \t]*$ would,
// at a tenth of its cost: a kustomization of 10,000 tenants is read several
// times per message.
func listItemOf(text string) (indent, value string, ok bool) {
	i := 0
	for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
		i++
	}
	if i >= len(text) || text[i] != '-' {
		return "", "", false
	}
	j := i + 1
	if j >= len(text) || (text[j] != ' ' && text[j] != '\t') {
		return "", "", false
	}
	for j < len(text) && (text[j] == ' ' || text[j] == '\t') {
		j++
	}
	return text[:i], strings.TrimRight(text[j:], " \t"), true
}

// withoutNote drops a trailing comment (blanks, then "#" to the end), as
// the regexp [ \t]+#.*$ would.
func withoutNote(s string) string {
	for j := 1; j < len(s); j++ {
		if s[j] == '#' && (s[j-1] == ' ' || s[j-1] == '\t') {
			k := j - 1
			for k > 0 && (s[k-1] == ' ' || s[k-1] == '\t') {
				k--
			}
			return s[:k]
		}
	}
	return s
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// verified remembers the files whose resources list the YAML parser
// confirmed, by content hash. Re-reading a kustomization of 10,000 tenants
// as YAML costs tens of milliseconds; an edit of a confirmed file only needs
// its edited lines checked. It holds far more files than a repository has
// kustomizations (at 256, 300 shard folders pushed each other out, and
// every read of one was parsed as YAML again): 65,536 hashes are about 4 MB.
var verified = newHashSet(1 << 16)

// hashSet is a bounded set of content hashes (SHA-256), safe for concurrent use; when
// full, the oldest half is forgotten.
type hashSet struct {
	mu    sync.Mutex
	limit int
	seen  map[[32]byte]int
	n     int
}

func newHashSet(limit int) *hashSet {
	return &hashSet{limit: limit, seen: map[[32]byte]int{}}
}

func (h *hashSet) has(sum [32]byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.seen[sum]
	return ok
}

func (h *hashSet) add(sum [32]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	h.seen[sum] = h.n
	if len(h.seen) > h.limit {
		for k, at := range h.seen {
			if at <= h.n-h.limit/2 {
				delete(h.seen, k)
			}
		}
	}
}

// verify re-reads (a piece of) the edited file as kustomize does, so a bug
// in the text editing can never write a list other than the one intended.
func verify(content []byte, want []string) error {
	got, err := Listed(content)
	if err != nil {
		return fmt.Errorf("edited kustomization: %w", err)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%w: after the edit kustomize would list %v, want %v", ErrForm, got, want)
	}
	return nil
}

// splitLines splits content after each "\n", keeping the separators, so
// joining the lines gives back the exact bytes.
func splitLines(content []byte) []string {
	if len(content) == 0 {
		return nil
	}
	parts := bytes.SplitAfter(content, []byte("\n"))
	lines := make([]string, 0, len(parts))
	for _, p := range parts {
		if len(p) > 0 {
			lines = append(lines, string(p))
		}
	}
	return lines
}

func lineEnding(line string) string {
	if strings.HasSuffix(line, "\r\n") {
		return "\r\n"
	}
	if strings.HasSuffix(line, "\n") {
		return "\n"
	}
	return ""
}

// insertAfter adds text as a new line after line i, keeping a missing final
// newline missing.
func insertAfter(lines []string, i int, text string) []string {
	nl := lineEnding(lines[i])
	if nl == "" {
		lines[i] += "\n"
		return slices.Insert(lines, i+1, text)
	}
	return slices.Insert(lines, i+1, text+nl)
}
