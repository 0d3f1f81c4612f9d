package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/intent"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// sync brings the clone up to date.
func (b *batch) sync(ctx context.Context) error {
	head := b.p.repo.Head()
	if !b.optimistic && !b.fetched {
		var err error
		if head, err = b.p.repo.Fetch(ctx); err != nil {
			return err
		}
	}
	b.base, b.tip = head, head
	b.ledgerBase = b.p.repo.LedgerHead()
	b.ledgerTip = b.ledgerBase
	if err := b.migrate(); err != nil {
		return err
	}
	b.ledger = ledgerRun{start: b.ledgerTip, files: map[string][]byte{}, commits: map[plumbing.Hash]bool{}}
	return nil
}

// applyJob renders, commits and validates one job on top of the batch's tip.
func (b *batch) applyJob(ctx context.Context, i int) {
	job, res := b.jobs[i], &b.results[i]
	if err := context.Cause(ctx); err != nil {
		// Shutdown's grace ran out: leave the rest for redelivery.
		res.Err = fmt.Errorf("not started: %w", err)
		return
	}
	before, err := b.snapshot(b.tip)
	if err != nil {
		res.Err = fmt.Errorf("open %s: %w", b.tip, err)
		return
	}

	records, err := b.p.repo.Snapshot(b.ledgerTip)
	if err != nil {
		res.Err = fmt.Errorf("open the ledger at %s: %w", b.ledgerTip, err)
		return
	}

	plan, err := b.plan(before, records, i)
	if err != nil {
		res.Err = err
		return
	}
	res.Message = plan.Message
	res.Duplicate, res.Stale, res.Recorded, res.Held = plan.Duplicate, plan.Stale, plan.Recorded, plan.Held
	res.Resolved = plan.Resolved
	if plan.Empty() {
		res.Commit = b.tip
		return
	}

	// The records first: a change to the branch Flux reads always comes
	// with them, a no-op, a held or an already-in-place message with them
	// alone, and main does not move for it.
	recorded := b.underRoot(plan.Ledger)
	ledgerCommit, err := b.commit(b.ledgerTip, recorded, withTrailers(plan.Message, job))
	if err != nil {
		res.Err = err
		return
	}
	if len(plan.Files) == 0 {
		b.keepLedger(ledgerCommit, plan.Ledger, plan.Message, job)
		res.Commit = ledgerCommit // the commit that holds the record
		b.pending[i] = true
		return
	}
	msg := withTrailers(plan.Message, job)
	commit, err := b.commit(b.tip, plan.Files, msg)
	if err != nil {
		res.Err = err
		return
	}

	after, err := b.snapshot(commit)
	if err != nil {
		res.Err = fmt.Errorf("open commit %s: %w", commit, err)
		return
	}
	paths := plan.Paths()
	err = b.timed(StepValidate, func() error {
		if err := b.p.checker.CheckFiles(after, paths); err != nil {
			return b.blame(before, job, err)
		}
		if !b.perJob {
			b.changed = append(b.changed, paths...)
			return nil // the kustomizations are built once for the batch
		}
		if err := b.p.checker.CheckDirs(after, paths); err != nil {
			// A branch that someone else broke must not send good messages
			// to the dead-letter queue.
			if before := b.p.checker.CheckDirs(before, paths); before != nil {
				return fmt.Errorf("%w: the branch does not build as it is: %v", gitops.ErrBroken, before)
			}
			return b.blame(before, job, err)
		}
		b.changed = append(b.changed, paths...) // the tip is built too
		return nil
	})
	if err == nil {
		// What Flux would apply must change as the message asks, and in
		// nothing else: checked for every job, on the commit it makes.
		err = b.timed(StepIntent, func() error {
			effects := plan.Effects
			if len(effects) == 0 {
				effects = []message.Request{job.Request}
			}
			if err := b.p.intent.Check(before, after, effects[0], paths, effects[1:]...); err != nil {
				return b.unintended(before, job, err)
			}
			return nil
		})
	}
	if err != nil {
		res.Err = err // the commit stays an unreferenced object
		return
	}
	b.advance(commit, plan.Files, msg)
	b.keepLedger(ledgerCommit, plan.Ledger, plan.Message, job)
	res.Commit = commit
	if b.p.opts.Releases {
		res.Releases = b.p.opts.Layout.Releases(before, plan.Files)
		res.Paths = slices.Sorted(maps.Keys(plan.Files))
		res.OwnShards = plan.ShardKustomizations
	}
	b.pending[i] = true
}

// commit writes files on parent, timed; no files: parent itself.
func (b *batch) commit(parent plumbing.Hash, files map[string][]byte, msg string) (plumbing.Hash, error) {
	if len(files) == 0 {
		return parent, nil
	}
	c := parent
	err := b.timed(StepCommit, func() error {
		var err error
		c, err = b.p.repo.Commit(parent, files, msg)
		return err
	})
	return c, err
}

// blame says whose fault a change that Flux could not apply is (err).
// Only an onboarding carries a value of its own into the files, its tenant
// id: a deployment or an offboarding that breaks the tree would break it
// for any message, and so does an onboarding when a stand-in tenant of the
// same tier fails the same way. Those are faults of the repository (the
// template, the branch), retried until someone fixes them; only what is
// the message's own is rejected.
func (b *batch) blame(before *gitrepo.Snapshot, job Job, err error) error {
	own, serr := b.standInPasses(before, job, func(_ message.Request, snap *gitrepo.Snapshot, paths []string) error {
		return b.p.checker.Check(snap, paths)
	})
	switch {
	case serr != nil:
		return serr
	case !own:
		return fmt.Errorf("%w: no message of this kind and tier can pass: %v", gitops.ErrBroken, err)
	}
	return reject.Wrap(reject.InvalidRender, fmt.Errorf("the change would break what Flux applies: %w", err))
}

// unintended says whose fault a change that does more than its message
// asks (err) is, as blame does: when a stand-in tenant of the same tier
// gets a change that is just as unintended, or the message is not an
// onboarding, the repository is what is odd (a kustomization in a form
// nobody foresaw, a template that touches what it should not): the worker
// pauses and names the files.
func (b *batch) unintended(before *gitrepo.Snapshot, job Job, err error) error {
	e, ok := intent.As(err)
	if !ok {
		return err // the check could not run: retried
	}
	own, serr := b.standInPasses(before, job, func(probe message.Request, snap *gitrepo.Snapshot, paths []string) error {
		return b.p.intent.Check(before, snap, probe, paths)
	})
	switch {
	case serr != nil:
		return serr
	case !own:
		return fmt.Errorf("%w: %s %s %s: %v (files: %s)", gitops.ErrBroken, reject.UnintendedChange,
			job.Request.Kind, job.Request.TenantID, e, strings.Join(e.Files(), ", "))
	}
	return reject.Wrap(reject.UnintendedChange, err)
}

// standInPasses tells whether the fault check found in job's change is the
// message's own: job is an onboarding, and the same onboarding of a
// stand-in tenant (message.ProbeTenant) passes check on before. A stand-in
// that changes nothing passes. The error is one of the stand-in's commit.
func (b *batch) standInPasses(before *gitrepo.Snapshot, job Job,
	check func(probe message.Request, after *gitrepo.Snapshot, paths []string) error) (bool, error) {
	if job.Request.Kind != message.Onboarding || job.Request.TenantID == message.ProbeTenant {
		return false, nil
	}
	probe := job.Request
	probe.TenantID = message.ProbeTenant
	change, err := b.p.opts.Layout.Plan(before, probe)
	if err != nil {
		return false, nil
	}
	if change.Empty() {
		return true, nil
	}
	c, err := b.p.repo.Commit(before.Commit, change.Files, "probe\n")
	if err != nil {
		return false, fmt.Errorf("commit the stand-in change: %w", err)
	}
	snap, err := b.snapshot(c)
	if err != nil {
		return false, fmt.Errorf("open the stand-in change: %w", err)
	}
	return check(probe, snap, change.Paths()) == nil, nil
}

// checkTip builds the kustomizations the batch touched, once, on its last
// commit.
func (b *batch) checkTip() error {
	return b.timed(StepValidate, func() error {
		tip, err := b.snapshot(b.tip)
		if err != nil {
			return fmt.Errorf("open commit %s: %w", b.tip, err)
		}
		return b.p.checker.CheckDirs(tip, b.changed)
	})
}

// plan computes job i's change on before. The change depends on the tree
// below the layout's root and, through the collision check, on what the
// platform declares anywhere else: a plan (or a refusal) is reused only on
// the very same tree, so a job is decided again on the head it is pushed
// on whenever anything changed, inside the root or outside it.
func (b *batch) plan(before, records *gitrepo.Snapshot, i int) (gitops.Change, error) {
	// The records decide too: the plan is reused only with the same ledger.
	root := before.TreeHash() + "@" + b.ledgerTip.String()
	if c, ok := b.plans[i]; ok && c.root == root {
		return c.change, c.err
	}
	var change gitops.Change
	err := b.timed(StepRender, func() error {
		var err error
		job := b.jobs[i]
		change, err = b.p.opts.Layout.PlanAt(before, job.Request, gitops.Stamp{
			MessageID: job.MessageID, Sent: job.SentAt, Now: time.Now(), Retention: b.p.opts.Retention, Hold: b.p.opts.Hold,
			Ledger: rooted{records, b.p.opts.Layout.Root},
		})
		return err
	})
	b.plans[i] = planned{root: root, change: change, err: err}
	return change, err
}

// planned is a job's plan and the tree it was computed on.
type planned struct {
	root   string
	change gitops.Change
	err    error
}

// push publishes the batch's commits if the branch is still where the batch
// started; otherwise it reports a conflict and the batch starts over.
func (b *batch) push(ctx context.Context) error {
	err := b.p.repo.PushRefs(ctx, gitrepo.Move{Old: b.base, New: b.tip}, gitrepo.Move{Old: b.ledgerBase, New: b.ledgerTip})
	switch {
	case err == nil:
		b.p.observe.Pushed(PushSuccess)
	case gitrepo.IsConflict(err):
		b.p.observe.Pushed(PushConflict)
	default:
		b.p.observe.Pushed(PushError)
	}
	return err
}

// Trailer keys recorded on every commit the worker makes.
const (
	TrailerMessageID = "Tenant-Worker-Message-Id"
	TrailerQueue     = "Tenant-Worker-Queue"
	// The request, so that a restarted worker can follow its recent
	// commits into the cluster again.
	TrailerKind   = "Tenant-Worker-Kind"
	TrailerTenant = "Tenant-Worker-Tenant"
	TrailerTier   = "Tenant-Worker-Tier"
)

// Trailers reads the worker's trailers of a commit message.
func Trailers(msg string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(msg, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && strings.HasPrefix(k, "Tenant-Worker-") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// withTrailers appends the message's id, queue and request to a commit
// message. The subject keeps the reference platform's wording.
func withTrailers(subject string, job Job) string {
	if job.MessageID == "" {
		return subject + "\n"
	}
	var b strings.Builder
	b.WriteString(subject)
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "%s: %s\n", TrailerMessageID, job.MessageID)
	for _, t := range []struct{ key, value string }{
		{TrailerQueue, job.Queue}, {TrailerKind, string(job.Request.Kind)},
		{TrailerTenant, job.Request.TenantID}, {TrailerTier, job.Request.Tier},
	} {
		if t.value != "" {
			fmt.Fprintf(&b, "%s: %s\n", t.key, t.value)
		}
	}
	return b.String()
}

// migrate moves a ledger kept in the tree (<root>/.tenant-worker, written
// by versions before the ledger branch) to the ledger branch, as the first
// commits of the batch: every record imported into the branch's layout,
// and the folder removed from the branch Flux reads, in the batch's one
// atomic push. No record is lost, and none is kept twice: a replica that
// migrates too loses the race and finds the branch made.
func (b *batch) migrate() error {
	if b.base.IsZero() {
		return nil
	}
	snap, err := b.snapshot(b.base)
	if err != nil {
		return fmt.Errorf("open %s: %w", b.base, err)
	}
	root := b.p.opts.Layout.Root
	var files [2][]byte
	found := false
	for i, name := range []string{ledger.LegacyTargets, ledger.LegacyMessages} {
		content, err := snap.ReadFile(path.Join(root, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", name, err)
		}
		files[i], found = content, true
	}
	if !found {
		return nil
	}
	// Into the ledger branch as it is: a version before it may still be
	// running beside this one (a rolling update) and write the folder
	// again, and each record is merged as a newer message's would be.
	current, err := b.p.repo.Snapshot(b.ledgerBase)
	if err != nil {
		return fmt.Errorf("open the ledger at %s: %w", b.ledgerBase, err)
	}
	records := ledger.Open(rooted{current, root})
	if err := records.Import(files[0], files[1]); err != nil {
		return fmt.Errorf("%w: the ledger in %s: %v", gitops.ErrBroken, path.Join(root, ledger.LegacyDir), err)
	}
	if err := records.Err(); err != nil {
		return fmt.Errorf("%w: the ledger branch: %v", gitops.ErrBroken, err)
	}
	changes := b.underRoot(records.Changes())
	if _, err := current.ReadFile(ledgerReadme); err != nil {
		changes[ledgerReadme] = []byte(readmeText)
	}
	lc, err := b.commit(b.ledgerBase, changes,
		fmt.Sprintf("Ledger: the records of %s, moved here\n", path.Join(root, ledger.LegacyDir)))
	if err != nil {
		return fmt.Errorf("write the ledger branch: %w", err)
	}
	removal := map[string][]byte{path.Join(root, ledger.LegacyDir): nil}
	msg := "Move the tenant-worker ledger out of the branch Flux reads\n\nIts records are on the ledger branch now.\n"
	mc, err := b.commit(b.base, removal, msg)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path.Join(root, ledger.LegacyDir), err)
	}
	b.advance(mc, removal, msg)
	b.ledgerTip = lc
	return nil
}

// rooted reads the part of the ledger branch that keeps one GitOps root's
// records: every root of a repository has its own, under its path.
type rooted struct {
	snap *gitrepo.Snapshot
	root string
}

func (r rooted) ReadFile(name string) ([]byte, error) {
	return r.snap.ReadFile(path.Join(r.root, name))
}
func (r rooted) ReadDir(name string) ([]string, error) {
	return r.snap.ReadDir(path.Join(r.root, name))
}

// FileID names a file's content, so that the ledger parses a file many
// commits share once.
func (r rooted) FileID(name string) (string, error) {
	return r.snap.FileID(path.Join(r.root, name))
}

// underRoot puts a change of the ledger's records under the layout's root.
func (b *batch) underRoot(files map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(files))
	for p, c := range files {
		out[path.Join(b.p.opts.Layout.Root, p)] = c
	}
	return out
}

// The ledger branch says what it is to whoever opens it.
const (
	ledgerReadme = "README"
	readmeText   = "Written by tenant-worker: the SQS send time of the last message applied to each tenant,\n" +
		"pooled environment and tier, and the ids of the messages applied within the queues' retention,\n" +
		"in a folder per GitOps root (GITOPS_ROOT). It moves with the branch Flux reads in one atomic push. Do not edit it by hand.\n"
)
