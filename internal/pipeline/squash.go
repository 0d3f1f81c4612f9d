package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/ledger"
)

// ledgerRun is what the jobs of one attempt wrote on the ledger branch.
// Each job commits its records on the one before, so that the next job
// reads them; the push carries one commit of them all (squashLedger): a
// batch rewrites each tree of the ledger once, not once per message, and
// the server receives and indexes that much less.
type ledgerRun struct {
	start    plumbing.Hash          // the ledger tip before the first job's commit
	files    map[string][]byte      // every job's change, merged in the jobs' order, relative to the layout's root
	commits  map[plumbing.Hash]bool // the jobs' commits
	subjects []string               // a line per job
}

// keepLedger makes c, job's commit of records on the ledger branch, the
// ledger's tip, and keeps its change (records, as the ledger wrote it,
// below the layout's root) for the squash.
func (b *batch) keepLedger(c plumbing.Hash, records map[string][]byte, subject string, job Job) {
	if c == b.ledgerTip {
		return // nothing recorded
	}
	b.ledgerTip = c
	b.ledger.commits[c] = true
	mergeChange(b.ledger.files, records)
	line := "- " + subject
	if job.MessageID != "" {
		id := job.MessageID
		if strings.ContainsFunc(id, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			id = strconv.Quote(id)
		}
		line += " [message " + id + "]"
	}
	b.ledger.subjects = append(b.ledger.subjects, line)
}

// mergeChange adds change (path to content, nil deletes a file or a
// folder) to into, so that into applied once does what the changes
// applied in turn do: a deletion drops what into writes below it, and
// change's own deletions come before its writes, as a commit applies them.
func mergeChange(into, change map[string][]byte) {
	for p, c := range change {
		if c != nil {
			continue
		}
		for q := range into {
			if strings.HasPrefix(q, p+"/") {
				delete(into, q)
			}
		}
		into[p] = nil
	}
	for p, c := range change {
		if c != nil {
			into[p] = c
		}
	}
}

// squashLedger replaces the jobs' ledger commits by one commit of their
// merged change on the same parent, and points their results at it. A
// change of many records goes to the ledger's journal (ledger.Squash),
// checked to read as the jobs left it; any other, with the same tree as
// the jobs' last commit. When that does not hold (which the merge rules
// out) the jobs' own commits are pushed: correct, only larger.
func (b *batch) squashLedger(ctx context.Context) error {
	if len(b.ledger.commits) < 2 {
		return nil
	}
	msg := fmt.Sprintf("Ledger: %d messages\n\n%s\n", len(b.ledger.subjects), strings.Join(b.ledger.subjects, "\n"))
	files, journaled, err := b.journal()
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Int("jobs", len(b.jobs)).
			Msg("the batch's ledger records do not go to the journal; pushing them to their groups")
	}
	c, err := b.p.repo.Commit(b.ledger.start, b.underRoot(files), msg)
	if err != nil {
		return fmt.Errorf("write the ledger's commit of the batch: %w", err)
	}
	if !journaled {
		same, err := b.sameTree(c, b.ledgerTip)
		if err != nil || !same {
			return err
		}
	}
	for i := range b.results {
		if b.ledger.commits[b.results[i].Commit] {
			b.results[i].Commit = c
		}
	}
	b.ledgerTip = c
	b.p.repo.Forget(slices.Collect(maps.Keys(b.ledger.commits))...)
	return nil
}

// journal is the batch's change of the ledger as ledger.Squash writes
// it, below the layout's root, and whether it differs from the jobs' own:
// their change, and why, when it cannot be made (the jobs' change is as
// good, only larger).
func (b *batch) journal() (map[string][]byte, bool, error) {
	root := b.p.opts.Layout.Root
	base, err := b.p.repo.Snapshot(b.ledger.start)
	if err != nil {
		return b.ledger.files, false, fmt.Errorf("open the ledger at %s: %w", b.ledger.start, err)
	}
	tip, err := b.p.repo.Snapshot(b.ledgerTip)
	if err != nil {
		return b.ledger.files, false, fmt.Errorf("open the ledger at %s: %w", b.ledgerTip, err)
	}
	out, err := ledger.Squash(rooted{base, root}, rooted{tip, root}, b.ledger.files)
	if err != nil {
		return b.ledger.files, false, err
	}
	return out, !maps.EqualFunc(out, b.ledger.files, bytes.Equal), nil
}

// sameTree reports whether commits a and c hold the same tree.
func (b *batch) sameTree(a, c plumbing.Hash) (bool, error) {
	var trees [2]string
	for i, h := range []plumbing.Hash{a, c} {
		snap, err := b.p.repo.Snapshot(h)
		if err != nil {
			return false, fmt.Errorf("open %s: %w", h, err)
		}
		if trees[i], err = snap.DirHash(""); err != nil {
			return false, fmt.Errorf("read the tree of %s: %w", h, err)
		}
	}
	return trees[0] == trees[1], nil
}
