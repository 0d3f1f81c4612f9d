package pipeline

import (
	"context"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
)

// renderStep computes the files the request changes on the current head. A
// request already carried out ends the attempt: no empty commit is made.
type renderStep struct{ layout gitops.Layout }

func (renderStep) Name() string { return "render" }

func (st renderStep) Run(_ context.Context, s *State) error {
	change, err := st.layout.Plan(s.Before, s.Request)
	if err != nil {
		return err
	}
	s.Change = change
	s.Done = change.Empty()
	return nil
}
