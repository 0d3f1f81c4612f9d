package pipeline

import (
	"context"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
)

// made is one commit a run made on the branch, with what it writes.
type made struct {
	commit plumbing.Hash
	files  map[string][]byte
	msg    string
}

// advance makes commit, which writes files, the run's tip.
func (b *batch) advance(commit plumbing.Hash, files map[string][]byte, msg string) {
	b.tip = commit
	b.made = append(b.made, made{commit: commit, files: files, msg: msg})
	// What the run writes counts as read: a change of it by another writer
	// is never rebased over.
	b.reads.Written(files)
}

// snapshot opens commit of the branch, recording what is read from it.
func (b *batch) snapshot(commit plumbing.Hash) (*gitrepo.Snapshot, error) {
	s, err := b.p.repo.Snapshot(commit)
	if err != nil {
		return nil, err
	}
	return s.Recording(b.reads), nil
}

// rebase writes the run's commits again on the branch's new head, after a
// lost race, and says whether it did, and whether it fetched the head. It does so only when the change that
// won touches nothing the run's attempts read of the branch or write to
// it (another writer's note, an image tag in a file no plan reads) and
// left the ledger branch alone: every plan, refusal, render and check of
// the run then comes out on the new head exactly as it did, so none is
// made again, and the push follows the fetch at once. A run that must be
// decided again (the change touches what it read, the ledger moved, the
// fetch failed) is run again whole.
//
// Without it a batch that takes longer to plan and check than another
// writer takes between two pushes (a deployment of a whole tier, beside
// an image automation) would lose every race until its attempts run out.
func (b *batch) rebase(ctx context.Context) (rebased, fetched bool) {
	b.spent = nil
	if b.dryRun || len(b.made) == 0 {
		return false, false
	}
	var head plumbing.Hash
	err := b.timed(StepSync, func() error {
		var err error
		head, err = b.p.repo.Refetch(ctx) // b.base, b.made and b.ledgerTip read below
		return err
	})
	if err != nil {
		return false, false
	}
	if head == b.base || b.p.repo.LedgerHead() != b.ledgerBase {
		return false, true
	}
	touched, err := b.p.repo.Touches(b.base, head, b.reads)
	if err != nil || touched {
		return false, true
	}
	moved := map[plumbing.Hash]plumbing.Hash{b.base: head}
	var old []plumbing.Hash
	parent := head
	for i, m := range b.made {
		c, err := b.commit(parent, m.files, m.msg)
		if err != nil {
			return false, true
		}
		moved[m.commit], parent = c, c
		old = append(old, m.commit)
		b.made[i].commit = c
	}
	for i := range b.results {
		if c, ok := moved[b.results[i].Commit]; ok {
			b.results[i].Commit = c
		}
	}
	b.base, b.tip = head, parent
	b.p.repo.Forget(old...)
	return true, true
}

// pushRun pushes the run's commits and says whether it must go again.
func (b *batch) pushRun(ctx context.Context) (again, error) {
	err := b.timed(StepPush, func() error { return b.push(ctx) })
	if gitrepo.IsConflict(err) {
		return lostRace, err
	}
	return "", err
}
