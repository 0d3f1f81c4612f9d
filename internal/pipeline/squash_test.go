package pipeline

import (
	"maps"
	"testing"
)

// TestMergeChangeAppliesInOrder: the batch's changes of the ledger merged
// into one do what they do one after the other: a later deletion of a
// folder drops what earlier changes wrote in it, a later write in a
// deleted folder stays, and a change's own deletions come before its
// writes.
func TestMergeChangeAppliesInOrder(t *testing.T) {
	into := map[string][]byte{}
	for _, change := range []map[string][]byte{
		{"r/messages/2026120312/ab": []byte("1"), "r/targets/a/b/c/d": []byte("x")},
		{"r/messages/2026120312": nil, "r/messages/2026120313/cd": []byte("2")},
		{"r/messages/2026120313": nil, "r/messages/2026120313/ef": []byte("3")},
		{"r/targets/a/b/c/d": []byte("y"), "r/targets/ab/cd": nil},
	} {
		mergeChange(into, change)
	}
	want := map[string][]byte{
		"r/messages/2026120312":    nil,
		"r/messages/2026120313":    nil,
		"r/messages/2026120313/ef": []byte("3"),
		"r/targets/a/b/c/d":        []byte("y"),
		"r/targets/ab/cd":          nil,
	}
	if !maps.EqualFunc(into, want, func(a, b []byte) bool { return string(a) == string(b) && (a == nil) == (b == nil) }) {
		t.Fatalf("merged %q\nwant %q", into, want)
	}
}
