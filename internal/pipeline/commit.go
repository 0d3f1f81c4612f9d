package pipeline

import "context"

// commitStep writes the change as a commit on the head it was computed on.
type commitStep struct{ repo Repository }

func (commitStep) Name() string { return "commit" }

func (st commitStep) Run(_ context.Context, s *State) error {
	c, err := st.repo.Commit(s.Base, s.Change.Files, s.Change.Message)
	if err != nil {
		return err
	}
	s.Commit = c
	return nil
}
