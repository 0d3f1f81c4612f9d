package pipeline

import (
	"bufio"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// history indexes the message-id trailers of the branch's recent commits,
// so a message that was applied but not deleted (a crash between push and
// delete, or a copy delivered to another replica) is recognised instead of
// applied twice. Memory is bounded: it remembers at most 2*depth commits.
type history struct {
	repo  Repository
	depth int
	ids   map[string]plumbing.Hash // message id -> commit
	known map[plumbing.Hash][]string
	order []plumbing.Hash // indexed commits, oldest first, for eviction
}

func newHistory(repo Repository, depth int) *history {
	return &history{repo: repo, depth: depth, ids: map[string]plumbing.Hash{}, known: map[plumbing.Hash][]string{}}
}

// find returns the commit that applied message id, if it is in the index.
func (h *history) find(id string) (plumbing.Hash, bool) {
	c, ok := h.ids[id]
	return c, ok
}

// update indexes the commits reachable from head that are not indexed yet,
// walking at most depth of them.
func (h *history) update(head plumbing.Hash) error {
	if head.IsZero() {
		return nil
	}
	var fresh []plumbing.Hash
	queue := []plumbing.Hash{head}
	seen := map[plumbing.Hash]bool{}
	for len(queue) > 0 && len(fresh) < h.depth {
		c := queue[0]
		queue = queue[1:]
		if seen[c] {
			continue
		}
		seen[c] = true
		if _, ok := h.known[c]; ok {
			continue
		}
		parents, msg, err := h.repo.CommitInfo(c)
		if err != nil {
			if c == head {
				return err
			}
			// Older commits may be gone from a compacted clone: history
			// ends there.
			continue
		}
		h.known[c] = trailerIDs(msg)
		for _, id := range h.known[c] {
			h.ids[id] = c
		}
		fresh = append(fresh, c)
		queue = append(queue, parents...)
	}
	// Oldest first, so eviction drops the oldest commits.
	for i := len(fresh) - 1; i >= 0; i-- {
		h.order = append(h.order, fresh[i])
	}
	for len(h.order) > 2*h.depth {
		old := h.order[0]
		h.order = h.order[1:]
		for _, id := range h.known[old] {
			if h.ids[id] == old {
				delete(h.ids, id)
			}
		}
		delete(h.known, old)
	}
	return nil
}

// trailerIDs reads the message-id trailers of a commit message.
func trailerIDs(msg string) []string {
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(msg))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), TrailerMessageID+": "); ok && v != "" {
			ids = append(ids, strings.TrimSpace(v))
		}
	}
	return ids
}
