package pipeline

import (
	"context"
	"fmt"
)

// syncStep brings the clone up to date and opens the tree to change.
type syncStep struct{ repo Repository }

func (syncStep) Name() string { return "sync" }

func (st syncStep) Run(ctx context.Context, s *State) error {
	head, err := st.repo.Fetch(ctx)
	if err != nil {
		return err
	}
	snap, err := st.repo.Snapshot(head)
	if err != nil {
		return fmt.Errorf("open head %s: %w", head, err)
	}
	s.Base, s.Before = head, snap
	return nil
}
