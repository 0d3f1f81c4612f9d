package gitrepo

import (
	"context"
	"fmt"
	"io"
	"maps"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// maxTracked bounds the objects remembered for commits not yet pushed
// (commits of abandoned attempts are never pushed).
const maxTracked = 100_000

// track remembers the objects written for commit, so that a push can send
// exactly these instead of walking the history to find them.
func (r *Repo) track(commit plumbing.Hash, parent plumbing.Hash, objects objectLog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.written == nil || r.trackedCount > maxTracked {
		r.written, r.trackedCount = map[plumbing.Hash]written{}, 0
	}
	r.written[commit] = written{parent: parent, objects: append(objects.hashes, commit), bases: objects.bases}
	r.trackedCount += len(objects.hashes) + 1
}

type written struct {
	parent  plumbing.Hash
	objects []plumbing.Hash
	bases   map[plumbing.Hash]plumbing.Hash // new tree -> the tree it replaces
}

// newObjects lists the objects of the commits from parent (excluded) to
// tip, oldest commit first, with the delta bases of their trees, or false
// when one of them was not written by this Repo.
func (r *Repo) newObjects(parent, tip plumbing.Hash) ([]plumbing.Hash, map[plumbing.Hash]plumbing.Hash, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var chain []written
	for c := tip; c != parent; {
		w, ok := r.written[c]
		if !ok {
			return nil, nil, false
		}
		chain = append(chain, w)
		c = w.parent
	}
	var all []plumbing.Hash
	bases := map[plumbing.Hash]plumbing.Hash{}
	for i := len(chain) - 1; i >= 0; i-- {
		all = append(all, chain[i].objects...)
		maps.Copy(bases, chain[i].bases)
	}
	return all, bases, true
}

// Push makes commit the remote branch, provided the branch is still at
// parent (a compare-and-swap: never a force push). A lost race is
// ErrConflict. The pack sent holds only the objects this Repo wrote for the
// new commits, so its cost follows the size of the change, not the history.
func (r *Repo) Push(ctx context.Context, parent, commit plumbing.Hash) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	hashes, bases, ok := r.newObjects(parent, commit)
	if !ok || r.opts.WalkingPush {
		return r.pushWalking(ctx, parent, commit)
	}
	err := r.sendPack(ctx, parent, commit, hashes, bases)
	if err != nil {
		err = classify("push "+r.opts.URL, err)
		if !IsConflict(err) {
			r.mu.Lock()
			r.receiveCaps = nil // ask again next time
			r.mu.Unlock()
		}
		return err
	}
	r.head = commit
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.trackingRef(), commit)); err != nil {
		return fmt.Errorf("record pushed head: %w", err)
	}
	r.mu.Lock()
	for c := commit; c != parent; {
		w, ok := r.written[c]
		if !ok {
			break
		}
		delete(r.written, c)
		c = w.parent
	}
	r.mu.Unlock()
	return r.maybeCompact()
}

func (r *Repo) sendPack(ctx context.Context, parent, commit plumbing.Hash, hashes []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	ep, err := transport.NewEndpoint(r.opts.URL)
	if err != nil {
		return err
	}
	c, err := client.NewClient(ep)
	if err != nil {
		return err
	}
	var auth transport.AuthMethod
	if r.auth != nil {
		auth = r.auth
	}
	sess, err := c.NewReceivePackSession(ep, auth)
	if err != nil {
		return err
	}
	defer sess.Close()
	dst := plumbing.NewBranchReferenceName(r.opts.Branch)

	// The server checks the old value of the branch itself when it updates
	// it, so once its capabilities are known the advertisement round trip is
	// skipped: a shorter window between fetch and push means fewer lost
	// races against busy writers.
	r.mu.Lock()
	caps := r.receiveCaps
	r.mu.Unlock()
	if caps == nil {
		ar, err := sess.AdvertisedReferencesContext(ctx)
		if err != nil {
			return err
		}
		refs, err := ar.AllReferences()
		if err != nil {
			return err
		}
		current := plumbing.ZeroHash
		if ref, ok := refs[dst]; ok {
			current = ref.Hash()
		}
		caps = ar.Capabilities
		r.mu.Lock()
		r.receiveCaps = caps
		r.mu.Unlock()
		if current != parent {
			return fmt.Errorf("non-fast-forward update: %s is at %s, not %s", dst, current, parent)
		}
	}

	req := packp.NewReferenceUpdateRequestFromCapabilities(caps)
	req.Commands = []*packp.Command{{Name: dst, Old: parent, New: commit}}
	rd, wr := io.Pipe()
	req.Packfile = rd
	done := make(chan error, 1)
	go func() {
		var err error
		if caps.Supports(noThin) {
			// The server wants every delta base in the pack: let go-git
			// choose deltas among the objects sent.
			_, err = packfile.NewEncoder(wr, r.repo.Storer, !caps.Supports(capability.OFSDelta)).Encode(hashes, 10)
		} else {
			err = writePack(wr, r.repo.Storer, hashes, bases)
		}
		if err != nil {
			done <- wr.CloseWithError(err)
			return
		}
		done <- wr.Close()
	}()
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil {
		_ = rd.Close()
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	if rs != nil {
		if err := rs.Error(); err != nil {
			return err
		}
	}
	return nil
}
