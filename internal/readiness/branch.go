package readiness

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/flux"
)

// maxBranch bounds the commits the follower keeps in order beyond those of
// the changes it follows. A revision older than every one of them is judged
// the same whether it is known or not: it holds none of the followed
// changes.
const maxBranch = 4096

// History depths: the first reading of the branch asks for a few commits
// (enough for what another replica pushed since), more when they do not
// reach a commit the follower knows.
const (
	firstDepth = 16
	maxDepth   = 1024
)

// Backoff of a failed reading of the branch.
const (
	firstHistoryDelay = time.Second
	maxHistoryDelay   = time.Minute
)

// historyMargin reaches back before the oldest followed push, for clocks
// that differ between the worker's replicas.
const historyMargin = time.Minute

// branch is the order of the branch's commits as the follower has seen
// them: the worker's pushes, and what a reading of the branch placed
// between and after them.
type branch struct {
	seq  []string       // oldest first
	base int            // position of seq[0]
	pos  map[string]int // commit -> position
	// settled holds revisions Flux names that a reading of the branch did
	// not place: older than anything followed. Kept only while Flux names
	// them.
	settled map[string]bool
	// retryAt and delay back off a failed reading of the branch.
	retryAt time.Time
	delay   time.Duration
}

func newBranch() branch {
	return branch{pos: map[string]int{}, settled: map[string]bool{}}
}

// see gives a commit the next position, if it has none.
func (b *branch) see(commit string) {
	if _, ok := b.pos[commit]; ok || commit == "" {
		return
	}
	b.pos[commit] = b.base + len(b.seq)
	b.seq = append(b.seq, commit)
}

// next is the position the next commit seen will get.
func (b *branch) next() int { return b.base + len(b.seq) }

// atOrAfter reports whether revision rev holds commit c: rev is c or comes
// after it.
func (b *branch) atOrAfter(rev, c string) bool {
	p, ok := b.pos[rev]
	q, ok2 := b.pos[c]
	return ok && ok2 && p >= q
}

// merge places chain, a contiguous stretch of the branch ending at its head
// (oldest first), among the commits seen. Those seen before the reading
// (position below cut) and not in chain are older than it; those seen since
// (pushed meanwhile) and not in chain come after it.
func (b *branch) merge(chain []string, cut int) {
	in := make(map[string]bool, len(chain))
	for _, c := range chain {
		in[c] = true
	}
	merged := make([]string, 0, len(b.seq)+len(chain))
	for i, c := range b.seq {
		if b.base+i < cut && !in[c] {
			merged = append(merged, c)
		}
	}
	merged = append(merged, chain...)
	for i, c := range b.seq {
		if b.base+i >= cut && !in[c] {
			merged = append(merged, c)
		}
	}
	b.seq = merged
	clear(b.pos)
	for i, c := range b.seq {
		b.pos[c] = b.base + i
	}
}

// trim drops the oldest commits beyond maxBranch, never one at or after
// the oldest commit of keep. It waits for a quarter more, so that it
// copies seldom.
func (b *branch) trim(keep map[string]bool) {
	if len(b.seq) <= maxBranch+maxBranch/4 {
		return
	}
	n := len(b.seq) - maxBranch
	for i := 0; i < n; i++ {
		if keep[b.seq[i]] {
			n = i
			break
		}
	}
	for _, c := range b.seq[:n] {
		delete(b.pos, c)
	}
	b.seq = append([]string(nil), b.seq[n:]...)
	b.base += n
}

// unknown returns the revisions st names that the follower cannot place
// and has not settled, and forgets settled revisions st no longer names.
func (b *branch) unknown(st flux.State) []string {
	named := map[string]bool{st.Fetched: true}
	for _, k := range st.Kustomizations {
		named[k.LastApplied], named[k.LastAttempted] = true, true
	}
	for _, sh := range st.Shards {
		named[sh.Origin] = true
	}
	delete(named, "")
	for r := range b.settled {
		if !named[r] {
			delete(b.settled, r)
		}
	}
	var out []string
	for r := range named {
		if _, ok := b.pos[r]; !ok && !b.settled[r] {
			out = append(out, r)
		}
	}
	return out
}

// place reads the branch when Flux names a revision the follower cannot
// place (a commit someone else pushed: another replica, a person, image
// automation): every commit since the oldest followed push gets its place,
// and the changes of other replicas among them replace what they change of
// the followed ones. A failed reading is tried again at a later step,
// backing off from firstHistoryDelay to maxHistoryDelay.
func (f *Follower) place(ctx context.Context, st flux.State) {
	if f.o.History == nil {
		return
	}
	now := f.o.Now()
	f.mu.Lock()
	unknown := f.branch.unknown(st)
	due := len(unknown) > 0 && !now.Before(f.branch.retryAt)
	cut := f.branch.next()
	since := now
	for _, p := range f.pending {
		if p.Pushed.Before(since) {
			since = p.Pushed
		}
	}
	f.mu.Unlock()
	if !due {
		return
	}
	chain, err := f.read(ctx, since.Add(-historyMargin), cut)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.branch.delay = min(max(2*f.branch.delay, firstHistoryDelay), maxHistoryDelay)
		f.branch.retryAt = now.Add(f.branch.delay)
		if ctx.Err() == nil {
			zerolog.Ctx(ctx).Warn().Err(err).Dur("retry_in", f.branch.delay).Strs("revisions", unknown).
				Msg("could not read the branch to place a revision Flux names; trying again")
		}
		return
	}
	f.branch.delay, f.branch.retryAt = 0, time.Time{}
	hashes := make([]string, len(chain))
	for i, c := range chain {
		hashes[i] = c.Hash
	}
	f.branch.merge(hashes, cut)
	for _, c := range chain {
		if c.Change != nil {
			t := *c.Change
			t.Commit = c.Hash
			f.supersede(t)
		}
	}
	for _, r := range unknown {
		if _, ok := f.branch.pos[r]; !ok {
			f.branch.settled[r] = true
		}
	}
}

// read reads the branch back to since, deeper while the commits read do
// not reach one seen before the reading (position below cut).
func (f *Follower) read(ctx context.Context, since time.Time, cut int) ([]Commit, error) {
	for depth := firstDepth; ; depth *= 4 {
		chain, err := f.o.History(ctx, since, depth)
		if err != nil {
			return nil, err
		}
		if len(chain) < depth || depth >= maxDepth || f.reaches(chain, cut) {
			return chain, nil
		}
	}
}

func (f *Follower) reaches(chain []Commit, cut int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range chain {
		if p, ok := f.branch.pos[c.Hash]; ok && p < cut {
			return true
		}
	}
	return false
}
