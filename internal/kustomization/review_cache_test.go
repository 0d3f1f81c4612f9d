package kustomization

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"testing"
)

// TestWarmCacheEditsAsACold: the parse cache holds more files than the
// set of files checked as YAML, so a file can still be cached after the
// set forgot it. Add on it must do what it does on a cold cache (found by
// review: it took the whole-file check instead of the local one, accepted
// an entry a cold Add refuses, and cached a parse no fresh read gives).
// The set is made small here to forget quickly; at its real size it takes
// 65,536 other files.
func TestWarmCacheEditsAsACold(t *testing.T) {
	defer func(p *parseCache, v *hashSet) { parsed, verified = p, v }(parsed, verified)
	const remembered = 8
	cold := func() { parsed, verified = newParseCache(parseCacheBytes), newHashSet(remembered) }

	// An entry written as an alias whose anchor (elsewhere) holds that very text.
	content := []byte("namespace: &a '*a'\nresources:\n  - x.yaml\n")
	const entry = "*a"

	cold()
	coldOut, _, coldErr := Add(content, entry)

	cold()
	if _, err := Resources(content); err != nil { // read once: cached and verified
		t.Fatal(err)
	}
	for i := range 2 * remembered { // a repository's other shard folders, read since
		if _, err := Resources(fmt.Appendf(nil, "resources:\n  - shard-%d.yaml\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := parsed.get(sha256.Sum256(content)); !ok || verified.has(sha256.Sum256(content)) {
		t.Fatal("setup: content must be cached and no longer known as checked")
	}
	warmOut, _, warmErr := Add(content, entry)

	t.Run("AddWarmVsCold", func(t *testing.T) {
		if (coldErr == nil) != (warmErr == nil) || string(coldOut) != string(warmOut) {
			t.Errorf("Add(%q) differs with a warm cache:\ncold: %q, %v\nwarm: %q, %v", entry, coldOut, coldErr, warmOut, warmErr)
		}
	})
	if warmErr != nil {
		return
	}
	t.Run("RememberedParseVsFresh", func(t *testing.T) {
		cached, ok := parsed.get(sha256.Sum256(warmOut))
		fresh, err := parse(splitLines(warmOut))
		if err != nil {
			t.Fatal(err)
		}
		if !ok || !reflect.DeepEqual(cached.block, fresh) {
			t.Errorf("cached parse of Add's output (held %v) differs from a fresh one:\ncached %+v\nfresh  %+v", ok, cached.block, fresh)
		}
	})
	t.Run("NextAddWarmVsCold", func(t *testing.T) {
		w, _, werr := Add(warmOut, "y.yaml")
		cold()
		c, _, cerr := Add(warmOut, "y.yaml")
		if (cerr == nil) != (werr == nil) || string(c) != string(w) {
			t.Errorf("Add(y.yaml) on %q differs with a warm cache:\ncold: %q, %v\nwarm: %q, %v", warmOut, c, cerr, w, werr)
		}
	})
}

// TestRememberLeavesIrregularItemsToTheParser: an added line whose value a
// fresh parse reads as irregular (an anchor, an alias, a flow collection)
// is not cached as a plain entry.
func TestRememberLeavesIrregularItemsToTheParser(t *testing.T) {
	for _, item := range []string{"*a", "&a x.yaml", "[x.yaml]", "{a: b}"} {
		lines := []string{"resources:\n", "  - x.yaml\n", "  - " + item + "\n"}
		sum := sha256.Sum256([]byte(lines[0] + lines[1] + lines[2]))
		remember(sum, lines, block{key: 0, items: []int{1}, values: []string{"x.yaml"}, indent: "  ", end: -1}, []string{"x.yaml", item})
		if p, ok := parsed.get(sum); ok {
			fresh, err := parse(lines)
			if err != nil || !reflect.DeepEqual(p.block, fresh) {
				t.Errorf("%s: cached %+v, a fresh parse gives %+v (%v)", item, p.block, fresh, err)
			}
		}
	}
}
