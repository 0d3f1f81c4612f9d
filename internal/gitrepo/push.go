package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/revlist"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"

	"github.com/tenant-worker/tenant-worker/internal/gitobj"
)

// noThin is the receive-pack capability of a server that refuses thin
// packs (packs whose deltas name bases the pack does not hold).
const noThin capability.Capability = "no-thin"

// maxTracked bounds the objects remembered for commits not yet pushed
// (commits of abandoned attempts are never pushed).
const maxTracked = 100_000

// track remembers the objects written for commit, so that a push can send
// exactly these instead of walking the history to find them.
func (r *Repo) track(commit plumbing.Hash, parent plumbing.Hash, objects gitobj.ObjectLog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.written == nil || r.trackedCount > maxTracked {
		r.written, r.trackedCount = map[plumbing.Hash]written{}, 0
	}
	r.written[commit] = written{parent: parent, objects: append(objects.Hashes, commit), bases: objects.Bases}
	r.trackedCount += len(objects.Hashes) + 1
}

// Forget drops what track remembers of commits that will never be pushed
// (a batch's per-message ledger commits, once squashed into one).
func (r *Repo) Forget(commits ...plumbing.Hash) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range commits {
		r.untrack(c)
	}
}

// untrack drops commit's record; the caller holds r.mu.
func (r *Repo) untrack(commit plumbing.Hash) (written, bool) {
	w, ok := r.written[commit]
	if ok {
		delete(r.written, commit)
		r.trackedCount -= len(w.objects)
	}
	return w, ok
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
		for h, base := range chain[i].bases {
			// The first commit that wrote h names its base: a version from
			// before h's first place in the pack, so deltas point back.
			if _, ok := bases[h]; !ok {
				bases[h] = base
			}
		}
	}
	return all, bases, true
}

// Move is the update of one ref: from Old (zero: the ref does not exist)
// to New. A Move with Old == New leaves the ref alone.
type Move struct{ Old, New plumbing.Hash }

func (m Move) moves() bool { return m.Old != m.New }

// Push makes commit the remote branch, provided the branch is still at
// parent: PushRefs with the ledger branch left alone.
func (r *Repo) Push(ctx context.Context, parent, commit plumbing.Hash) error {
	return r.PushRefs(ctx, Move{parent, commit}, Move{r.ledgerHead, r.ledgerHead})
}

// PushRefs moves the branch and the ledger branch, each provided it is
// still at its Old commit, in one push that the server applies whole or
// not at all (git's atomic capability): a compare-and-swap of both, never
// a force push. A lost race is ErrConflict. The pack sent holds only the
// objects this Repo wrote for the new commits, so its cost follows the
// size of the change, not the history. A server that cannot move two refs
// atomically is refused (ErrNoAtomic) rather than left with one moved.
//
// What happened is decided by the server's state, not by the wording of its
// answer: after a push that failed, or whose report did not come, both
// refs are read back. At the new commits, the push landed; moved
// elsewhere, another writer won the race; still at the old ones, the push
// failed.
func (r *Repo) PushRefs(ctx context.Context, main, ledger Move) error {
	if !main.moves() && !ledger.moves() {
		return nil
	}
	if err := r.begin(ctx, "push "+r.url()); err != nil {
		return err
	}
	if ledger.moves() && r.opts.LedgerBranch == "" {
		return errors.New("push: no ledger branch is configured")
	}
	err := r.send(ctx, main, ledger)
	if err != nil && !IsAuth(err) && !IsConflict(err) && !errors.Is(err, ErrNoAtomic) {
		// A renamed repository answers its old URL with a redirect.
		if moved, merr := r.relocate(ctx); merr != nil {
			err = errors.Join(err, merr)
		} else if moved {
			err = r.send(ctx, main, ledger)
		}
	}
	if err != nil && !errors.Is(err, ErrNoAtomic) {
		err = r.decide(ctx, main, ledger, err)
	}
	if err != nil {
		if !IsConflict(err) {
			r.mu.Lock()
			r.receiveCaps = nil // ask again next time
			r.mu.Unlock()
		}
		return err
	}
	r.head = main.New
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.trackingRef(), main.New)); err != nil {
		return fmt.Errorf("record pushed head: %w", err)
	}
	if ledger.moves() {
		r.ledgerHead = ledger.New
		if err := r.repo.Storer.SetReference(plumbing.NewHashReference(r.ledgerTrackingRef(), ledger.New)); err != nil {
			return fmt.Errorf("record pushed ledger head: %w", err)
		}
	}
	r.mu.Lock()
	for _, m := range []Move{main, ledger} {
		for c := m.New; c != m.Old; {
			w, ok := r.untrack(c)
			if !ok {
				break
			}
			c = w.parent
		}
	}
	r.mu.Unlock()
	return r.maybeCompact(true)
}

// ErrNoAtomic: the server does not take pushes of several refs as one
// (git's atomic capability), which moving the ledger with the branch needs.
var ErrNoAtomic = errors.New("the git server does not offer atomic pushes (git's \"atomic\" capability), " +
	"which moving the ledger branch with the branch needs")

// SupportsAtomic tells whether the server takes a push of several refs as
// one, from its receive-pack advertisement (which needs push access).
func (r *Repo) SupportsAtomic(ctx context.Context) (bool, error) {
	if err := r.CanPush(ctx); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.receiveCaps != nil && r.receiveCaps.Supports(capability.Atomic), nil
}

// errNoReport: the server accepted the request but reported nothing.
var errNoReport = errors.New("the server sent no report on the push")

// send pushes within the git timeout: a thin pack of the objects this Repo
// wrote, or go-git's own push for commits it did not write. Its error is
// classified with the push's own context, whose time may have run out.
func (r *Repo) send(ctx context.Context, main, ledger Move) error {
	op := "push " + r.url()
	c, err := r.startCall(ctx, op, r.opts.Timeout)
	if err != nil {
		return err
	}
	defer c.end()
	err = r.sendWith(c, main, ledger)
	if err != nil && !errors.Is(err, ErrNoAtomic) {
		err = r.classify(c.ctx, op, err)
	}
	return err
}

// sendWith is send within call c.
func (r *Repo) sendWith(c *call, main, ledger Move) error {
	var hashes []plumbing.Hash
	bases := map[plumbing.Hash]plumbing.Hash{}
	ours := true
	for _, m := range []Move{main, ledger} {
		if !m.moves() {
			continue
		}
		h, b, ok := r.newObjects(m.Old, m.New)
		ours = ours && ok
		hashes = append(hashes, h...)
		maps.Copy(bases, b)
	}
	if r.opts.WalkingPush && !ledger.moves() {
		return r.pushWalking(c, main, ledger)
	}
	if !ours {
		// Commits this Repo did not write (or no longer remembers): their
		// objects found by walking from the new commits to the old ones.
		// Still sent by sendPack, whose command for a branch that does not
		// move checks it (go-git's own push drops such a command).
		var wants, haves []plumbing.Hash
		for _, m := range []Move{main, ledger} {
			if m.moves() {
				wants = append(wants, m.New)
				if !m.Old.IsZero() {
					haves = append(haves, m.Old)
				}
			}
		}
		var err error
		if hashes, err = revlist.Objects(r.repo.Storer, wants, haves); err != nil {
			return fmt.Errorf("list the objects to push: %w", err)
		}
		clear(bases)
	}
	return r.sendPack(c, main, ledger, hashes, bases)
}

// decide reads both refs back after a push that did not clearly succeed
// and says what the push did (see PushRefs).
func (r *Repo) decide(ctx context.Context, main, ledger Move, pushErr error) error {
	if IsAuth(pushErr) || IsConflict(pushErr) {
		return pushErr // refused before anything was sent, or seen in the advertisement
	}
	remote, remoteLedger, err := r.remoteHeads(ctx)
	switch {
	case err != nil:
		return errors.Join(pushErr, fmt.Errorf("read the branch back: %w", err))
	case remote == main.New && (!ledger.moves() || remoteLedger == ledger.New):
		return nil // the push landed; only its report was lost
	case remote == main.Old && (!ledger.moves() || remoteLedger == ledger.Old):
		return pushErr
	case remote != main.New && remote != main.Old:
		return fmt.Errorf("%w: %s is at %s, not %s: %v", ErrConflict, r.opts.Branch, remote, main.Old, pushErr)
	default:
		return fmt.Errorf("%w: %s is at %s, not %s: %v", ErrConflict, r.opts.LedgerBranch, remoteLedger, ledger.Old, pushErr)
	}
}

// RemoteHead reads the branch's commit on the server (zero when the branch
// does not exist), within the git timeout.
func (r *Repo) RemoteHead(ctx context.Context) (plumbing.Hash, error) {
	h, _, err := r.remoteHeads(ctx)
	return h, err
}

// remoteHeads reads the branch's and the ledger branch's commits on the
// server (zero for one that does not exist), within the git timeout.
func (r *Repo) remoteHeads(ctx context.Context) (main, ledger plumbing.Hash, err error) {
	remote, err := r.repo.Remote(remoteName)
	if err != nil {
		return main, ledger, err
	}
	c, err := r.startCall(ctx, "list "+r.url(), r.opts.Timeout)
	if err != nil {
		return main, ledger, err
	}
	defer c.end()
	refs, err := remote.ListContext(c.ctx, &git.ListOptions{Auth: c.auth, ProxyOptions: c.proxy})
	if err != nil {
		return main, ledger, r.classify(c.ctx, "list "+r.url(), err)
	}
	for _, ref := range refs {
		switch ref.Name() {
		case plumbing.NewBranchReferenceName(r.opts.Branch):
			main = ref.Hash()
		case plumbing.NewBranchReferenceName(r.opts.LedgerBranch):
			if r.opts.LedgerBranch != "" {
				ledger = ref.Hash()
			}
		}
	}
	return main, ledger, nil
}

// CanPush asks the server for its receive-pack advertisement, which git
// servers give only to a client that may push (Gitea checks the token's
// write access there): it tells whether a push could get through, without
// pushing. It also learns the server's capabilities for the next push.
func (r *Repo) CanPush(ctx context.Context) error {
	c, err := r.startCall(ctx, "push "+r.url(), r.opts.Timeout)
	if err != nil {
		return err
	}
	defer c.end()
	sess, err := r.receivePackSession(c)
	if err != nil {
		return r.classify(c.ctx, "push "+r.url(), err)
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(c.ctx)
	if err != nil {
		return r.classify(c.ctx, "push "+r.url(), err)
	}
	r.mu.Lock()
	r.receiveCaps, r.capsRead = ar.Capabilities, time.Now()
	r.mu.Unlock()
	return nil
}

// capsFor is how long the server's receive-pack capabilities are trusted
// without reading its advertisement again: a push skips that round trip
// (a shorter window between fetch and push), and a server that stops
// offering atomic pushes is noticed within it. git's receive-pack applies
// an atomic request only while it advertises the capability: pushed on
// old capabilities, the two refs would move one by one.
const capsFor = time.Minute

// receivePackSession opens a push session within call c.
func (r *Repo) receivePackSession(c *call) (transport.ReceivePackSession, error) {
	ep, err := transport.NewEndpoint(r.url())
	if err != nil {
		return nil, err
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return nil, err
	}
	ep.Proxy = c.proxy
	return cl.NewReceivePackSession(ep, c.auth)
}

func (r *Repo) sendPack(c *call, main, ledger Move, hashes []plumbing.Hash, bases map[plumbing.Hash]plumbing.Hash) error {
	sess, err := r.receivePackSession(c)
	if err != nil {
		return err
	}
	defer sess.Close()
	cmds := r.commands(main, ledger)

	// The server checks the old value of each ref itself when it updates
	// it, so once its capabilities are known the advertisement round trip is
	// skipped: a shorter window between fetch and push means fewer lost
	// races against busy writers.
	r.mu.Lock()
	caps := r.receiveCaps
	if time.Since(r.capsRead) > capsFor {
		caps = nil
	}
	r.mu.Unlock()
	if caps == nil {
		ar, err := sess.AdvertisedReferencesContext(c.ctx)
		if err != nil {
			return err
		}
		refs, err := ar.AllReferences()
		if err != nil {
			return err
		}
		caps = ar.Capabilities
		r.mu.Lock()
		r.receiveCaps, r.capsRead = caps, time.Now()
		r.mu.Unlock()
		for _, c := range cmds {
			current := plumbing.ZeroHash
			if ref, ok := refs[c.Name]; ok {
				current = ref.Hash()
			}
			if current != c.Old {
				return fmt.Errorf("%w: %s is at %s, not %s", ErrConflict, c.Name, current, c.Old)
			}
		}
	}
	if len(cmds) > 1 && !caps.Supports(capability.Atomic) {
		return ErrNoAtomic
	}

	req := packp.NewReferenceUpdateRequestFromCapabilities(caps)
	req.Commands = cmds
	if len(cmds) > 1 {
		if err := req.Capabilities.Set(capability.Atomic); err != nil {
			return err
		}
	}
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
			err = gitobj.WritePack(wr, r.repo.Storer, hashes, bases)
		}
		if err != nil {
			done <- wr.CloseWithError(err)
			return
		}
		done <- wr.Close()
	}()
	rs, err := sess.ReceivePack(c.ctx, req)
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

// commands are the ref updates of a push: the branch's and the ledger
// branch's that move.
func (r *Repo) commands(main, ledger Move) []*packp.Command {
	var cmds []*packp.Command
	if main.moves() || ledger.moves() && !main.Old.IsZero() {
		// A ledger that moves alone still names the branch, from its commit
		// to itself: the atomic push then holds only while the branch is
		// where the records were decided on (a record of a message found
		// in place must not land on a branch someone changed meanwhile).
		cmds = append(cmds, &packp.Command{Name: plumbing.NewBranchReferenceName(r.opts.Branch), Old: main.Old, New: main.New})
	}
	if ledger.moves() {
		cmds = append(cmds, &packp.Command{Name: plumbing.NewBranchReferenceName(r.opts.LedgerBranch), Old: ledger.Old, New: ledger.New})
	}
	return cmds
}
