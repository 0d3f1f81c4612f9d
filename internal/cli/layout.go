package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/intent"
	"github.com/tenant-worker/tenant-worker/internal/progress"
	"github.com/tenant-worker/tenant-worker/internal/validate"
)

const layoutUsage = `Usage: tenant-worker layout show|migrate [flags]

show prints how the branch lays out tenant files: in each tier's folder
(the platform's layout), or spread over shard folders of each tier.

migrate moves every tenant file of every tier to where a layout of
--shards folders per tier puts it (--shards 0: back into the tier's own
folder), records the layout in tenants/layout.yaml and pushes that as one
commit. Files move byte for byte and keep whether a kustomization lists
them: before pushing, the commit is built the way Flux reads it and
compared with the branch, and it is refused unless every object Flux
applies is the same, field for field. So the Kustomization that applies
the tenants folder prunes nothing and recreates nothing. Workers running
on the branch need no restart: each reads the layout from the commit it
edits. But every replica must run a version that has this command: an
older one looks for tenants only in the tier's folder. A worker's push
that lands first makes the migration start again from it (at most 5
times).

migrate --shard-kustomizations gives the shard folders Kustomizations of
their own (the branch must be in shard folders already), and hands the
tenants over to them in the cluster, so that nothing is pruned: it
suspends the tenants Kustomization (the first of FLUX_KUSTOMIZATIONS),
pushes the commit in which the tiers stop listing their shard folders
(checked as above, across every Kustomization), waits until every shard
folder's Kustomization, made by the worker running with ARTIFACT_URL, has
applied it (--wait), then resumes the tenants Kustomization and waits
until it has applied it too. Objects a Kustomization applied last carry its
name, and Flux prunes only those: after the shard Kustomizations applied
every tenant, the tenants Kustomization prunes none. It needs KUBECONFIG
(or a pod's account) allowed to patch that Kustomization and read the
others. Run again after a failure, it carries on where it stopped; while
it waits, the tenants Kustomization stays suspended, which deletes
nothing.

migrate --no-shard-kustomizations hands them back: it suspends every shard
folder's Kustomization, pushes the commit in which the tiers list their
shard folders again, waits until the tenants Kustomization has applied it,
then deletes the shard folders' Kustomizations (suspended, so Flux deletes
nothing of theirs) and ExternalArtifacts.

Exit 0 when the branch has the layout (pushed now or before), 1 when the
repository cannot be moved as it is (the reason names the file), git or
the cluster fails, or a wait ends, 2 for bad flags.

Example:
  tenant-worker layout migrate --shards 16
  tenant-worker layout migrate --shards 0 --dry-run
  tenant-worker layout migrate --shard-kustomizations
  tenant-worker layout migrate --no-shard-kustomizations
`

// migrateAttempts bounds the migrations started again after a worker's
// push landed first.
const migrateAttempts = 5

func layoutCmd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlags("layout", layoutUsage, stdout, stderr)
	opts := config.Default()
	opts.BindGroups(fs, getenv, config.Git)
	opts.BindGroups(fs, getenv, config.Worker)
	shards := fs.Int("shards", -1, "shard folders per tier to migrate to, 1 to 100; 0 moves the tenants back into their tier's folder")
	dryRun := fs.Bool("dry-run", false, "check and print the migration, push nothing")
	own := fs.Bool("shard-kustomizations", false, "give the shard folders Kustomizations of their own, handing the tenants over to them in the cluster")
	back := fs.Bool("no-shard-kustomizations", false, "hand the tenants back from the shard folders' Kustomizations to the tenants Kustomization, and delete those")
	wait := fs.Duration("wait", 10*time.Minute, "with --shard-kustomizations, how long each Kustomization may take to apply the commit")
	code, done := parse(fs, args)
	if done {
		return code
	}
	if fs.NArg() != 1 || fs.Arg(0) != "show" && fs.Arg(0) != "migrate" {
		fmt.Fprintf(stderr, "tenant-worker layout: want show or migrate, got %q\n", fs.Args())
		return 2
	}
	migrating := fs.Arg(0) == "migrate"
	if migrating && (*own || *back) {
		if *own && *back {
			fmt.Fprintln(stderr, "tenant-worker layout migrate: --shard-kustomizations or --no-shard-kustomizations, not both")
			return 2
		}
		if *shards != -1 {
			fmt.Fprintln(stderr, "tenant-worker layout migrate: --shard-kustomizations keeps the shard folders as they are: move them with --shards first")
			return 2
		}
	} else if migrating && (*shards < 0 || *shards > gitops.MaxShards) {
		fmt.Fprintf(stderr, "tenant-worker layout migrate: --shards must be 0 to %d\n", gitops.MaxShards)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	line := progress.New(stderr)
	repo, code := openRepo(ctx, "layout", opts, line, stderr)
	if repo == nil {
		return code
	}
	base := gitops.Layout{Root: opts.GitopsRoot}
	if !migrating {
		snap, err := repo.Snapshot(repo.Head())
		if err != nil {
			fmt.Fprintf(stderr, "tenant-worker layout: %v\n", err)
			return 1
		}
		l, err := base.Of(snap)
		if err != nil {
			fmt.Fprintf(stderr, "tenant-worker layout: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s at %s: %s\n", opts.GitBranch, repo.Head(), l.Describe())
		return 0
	}
	if *own || *back {
		return handover(ctx, opts, repo, base, *own, *wait, *dryRun, line, stdout, stderr)
	}
	msg, err := migrate(ctx, repo, base, func(l gitops.Layout) gitops.Layout {
		l.Shards = *shards
		if *shards == 0 {
			l.ShardKustomizations = false
		}
		return l
	}, *dryRun, line, stderr)
	line.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker layout migrate: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, msg)
	return 0
}

// migrate is migrateOnce, started again from the new head when a worker's
// push lands first (at most migrateAttempts times).
func migrate(ctx context.Context, repo *gitrepo.Repo, base gitops.Layout, target func(gitops.Layout) gitops.Layout,
	dryRun bool, line *progress.Line, stderr io.Writer) (string, error) {
	for attempt := 1; ; attempt++ {
		msg, err := migrateOnce(ctx, repo, base, target, dryRun, line)
		if !errors.Is(err, gitrepo.ErrConflict) || attempt == migrateAttempts {
			return msg, err
		}
		line.Clear()
		fmt.Fprintf(stderr, "tenant-worker layout: %s moved while migrating; starting again from it\n", repo.Branch())
		if _, err := repo.Fetch(ctx); err != nil {
			return "", err
		}
	}
}

// migrateOnce migrates the branch at the clone's head: it plans, commits,
// checks and (unless dryRun) pushes, and says what it did.
func migrateOnce(ctx context.Context, repo *gitrepo.Repo, base gitops.Layout, target func(gitops.Layout) gitops.Layout, dryRun bool, line *progress.Line) (string, error) {
	head := repo.Head()
	before, err := repo.Snapshot(head)
	if err != nil {
		return "", err
	}
	from, err := base.Of(before)
	if err != nil {
		return "", err
	}
	to := target(from)
	line.Show("planning the move")
	files, err := base.MigrateTo(before, to)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return fmt.Sprintf("%s is laid out %s already: nothing to change", head, to.Describe()), nil
	}
	moved := 0
	for p, c := range files {
		if c != nil && strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, "/kustomization.yaml") && p != base.LayoutFile() {
			moved++
		}
	}
	subject := fmt.Sprintf("Layout: tenant files %s", to.Describe())
	commit, err := repo.Commit(head, files, subject+"\n\nWritten by `tenant-worker layout migrate`: files moved byte for byte, the objects Flux applies unchanged.")
	if err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	after, err := repo.Snapshot(commit)
	if err != nil {
		return "", err
	}
	changed := make([]string, 0, len(files))
	for p := range files {
		changed = append(changed, p)
	}
	sort.Strings(changed)
	line.Show("building what Flux would apply")
	if err := validate.NewChecker(base).Check(after, changed); err != nil {
		return "", fmt.Errorf("the moved tree does not build: %w", err)
	}
	line.Show("comparing it with what Flux applies now")
	if err := intent.NewChecker(base).Moved(before, after, changed); err != nil {
		return "", fmt.Errorf("the move would change what Flux applies, so nothing is pushed: %w", err)
	}
	if dryRun {
		return fmt.Sprintf("would move %d tenant files (%d paths changed) to lay out %s %s; nothing was pushed",
			moved, len(files), repo.Branch(), to.Describe()), nil
	}
	line.Show("pushing")
	if err := repo.Push(ctx, head, commit); err != nil {
		return "", err
	}
	return fmt.Sprintf("moved %d tenant files (%d paths changed): %s is laid out %s at %s", moved, len(files), repo.Branch(), to.Describe(), commit), nil
}
