package ledger

import "fmt"

// The flat files the ledger was before its own ref, relative to the
// GitOps layout's root: read once by Import, then removed.
const (
	LegacyDir      = ".tenant-worker"
	LegacyTargets  = LegacyDir + "/targets"
	LegacyMessages = LegacyDir + "/messages"
)

// Import records every record of the flat files targets and messages
// (their content; nil is empty) as Set and Note would: the one-time move
// to the grouped layout. Keys are read in their current form (see
// canonical), so that records written before escaping are found; of two
// lines naming one target, the newer counts. Nothing is recorded when
// either file does not parse (an error wrapping ErrCorrupt).
func (l *Ledger) Import(targets, messages []byte) error {
	nothing := func(string, int64, string) {}
	if err := each(targets, nothing); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, LegacyTargets, err)
	}
	if err := each(messages, nothing); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, LegacyMessages, err)
	}
	// Both parse (above): read again rather than hold millions of records twice.
	_ = each(targets, func(key string, ms int64, value string) { l.Set(canonical(key), ms, value) })
	_ = each(messages, func(id string, ms int64, _ string) { l.Note(id, ms) })
	return nil
}
