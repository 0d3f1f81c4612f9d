package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/go-git/go-git/v5"
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
//
// What happened is decided by the server's state, not by the wording of its
// answer: after a push that failed, or whose report did not come, the
// branch is read back. At commit, the push landed; moved elsewhere, another
// writer won the race; still at parent, the push failed.
func (r *Repo) Push(ctx context.Context, parent, commit plumbing.Hash) error {
	err := r.send(ctx, parent, commit)
	if err != nil && !IsAuth(err) && !IsConflict(err) {
		// A renamed repository answers its old URL with a redirect.
		if moved, merr := r.relocate(ctx); merr != nil {
			err = errors.Join(err, merr)
		} else if moved {
			err = r.send(ctx, parent, commit)
		}
	}
	if err != nil {
		err = r.decide(ctx, parent, commit, r.classify("push "+r.url(), err))
	}
	if err != nil {
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

// errNoReport: the server accepted the request but reported nothing.
var errNoReport = errors.New("the server sent no report on the push")

// send pushes within the git timeout: a thin pack of the objects this Repo
// wrote, or go-git's own push for commits it did not write.
func (r *Repo) send(ctx context.Context, parent, commit plumbing.Hash) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	auth, err := r.auth.Auth()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrAuth, err)
	}
	hashes, bases, ok := r.newObjects(parent, commit)
	if !ok || r.opts.WalkingPush {
		return r.pushWalking(ctx, auth, parent, commit)
	}
	return r.sendPack(ctx, auth, parent, commit, hashes, bases)
}

// decide reads the branch back after a push that did not clearly succeed
// and says what the push did (see Push).
func (r *Repo) decide(ctx context.Context, parent, commit plumbing.Hash, pushErr error) error {
	if IsAuth(pushErr) || IsConflict(pushErr) {
		return pushErr // refused before anything was sent, or seen in the advertisement
	}
	remote, err := r.RemoteHead(ctx)
	switch {
	case err != nil:
		return errors.Join(pushErr, fmt.Errorf("read the branch back: %w", err))
	case remote == commit:
		return nil // the push landed; only its report was lost
	case remote == parent:
		return pushErr
	default:
		return fmt.Errorf("%w: %s is at %s, not %s: %v", ErrConflict, r.opts.Branch, remote, parent, pushErr)
	}
}

// RemoteHead reads the branch's commit on the server (zero when the branch
// does not exist), within the git timeout.
func (r *Repo) RemoteHead(ctx context.Context) (plumbing.Hash, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	remote, err := r.repo.Remote(remoteName)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	auth, err := r.auth.Auth()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("list %s: %w: %v", r.url(), ErrAuth, err)
	}
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil {
		return plumbing.ZeroHash, r.classify("list "+r.url(), err)
	}
	want := plumbing.NewBranchReferenceName(r.opts.Branch)
	for _, ref := range refs {
		if ref.Name() == want {
			return ref.Hash(), nil
		}
	}
	return plumbing.ZeroHash, nil
}

// CanPush asks the server for its receive-pack advertisement, which git
// servers give only to a client that may push (Gitea checks the token's
// write access there): it tells whether a push could get through, without
// pushing. It also learns the server's capabilities for the next push.
func (r *Repo) CanPush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	auth, err := r.auth.Auth()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrAuth, err)
	}
	sess, err := r.receivePackSession(auth)
	if err != nil {
		return r.classify("push "+r.url(), err)
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return r.classify("push "+r.url(), err)
	}
	r.mu.Lock()
	r.receiveCaps = ar.Capabilities
	r.mu.Unlock()
	return nil
}

func (r *Repo) receivePackSession(auth transport.AuthMethod) (transport.ReceivePackSession, error) {
	ep, err := transport.NewEndpoint(r.url())
	if err != nil {
		return nil, err
	}
	c, err := client.NewClient(ep)
	if err != nil {
		return nil, err
	}
	return c.NewReceivePackSession(ep, auth)
}

func (r *Repo) sendPack(ctx context.Context, auth transport.AuthMethod, parent, commit plumbing.Hash, hashes []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	sess, err := r.receivePackSession(auth)
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
			return fmt.Errorf("%w: %s is at %s, not %s", ErrConflict, dst, current, parent)
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
	if rs == nil {
		if caps.Supports(capability.ReportStatus) {
			return errNoReport
		}
		return nil
	}
	return rs.Error()
}
