package pipeline

import (
	"context"
	"fmt"

	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/validate"
)

// validateStep checks the committed tree the way Flux will read it, before
// anything is pushed. A commit that fails stays an unreferenced object.
type validateStep struct {
	repo    Repository
	checker validate.Checker
}

func (validateStep) Name() string { return "validate" }

func (st validateStep) Run(_ context.Context, s *State) error {
	after, err := st.repo.Snapshot(s.Commit)
	if err != nil {
		return fmt.Errorf("open commit %s: %w", s.Commit, err)
	}
	paths := s.Change.Paths()
	err = st.checker.Check(after, paths)
	if err == nil {
		return nil
	}
	// Blame the message only if the tree was valid before it: a branch that
	// someone else broke must not send good messages to the dead-letter queue.
	if before := st.checker.Check(s.Before, paths); before != nil {
		return fmt.Errorf("the branch is already invalid, waiting for a fix: %w", before)
	}
	return reject.Wrap(reject.InvalidRender, fmt.Errorf("the change would break what Flux applies: %w", err))
}
