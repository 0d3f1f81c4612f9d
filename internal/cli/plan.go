package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/app"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/progress"
	"github.com/tenant-worker/tenant-worker/internal/redact"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

func planCmd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlags("plan", planUsage, stdout, stderr)
	opts := config.Default()
	opts.BindGroups(fs, getenv, config.Git)
	var req requestFlags
	req.bind(fs)
	kind, code, done := parseKind(fs, args, stderr)
	if done {
		return code
	}
	_, request, err := req.message(kind)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker plan: the worker would refuse this message: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	line := progress.New(stderr)
	repo, code := openRepo(ctx, "plan", opts, line, stderr)
	if repo == nil {
		return code
	}
	p := pipeline.New(repo, pipeline.Options{
		Layout: gitops.Layout{Root: opts.GitopsRoot}, DryRun: true, MaxAttempts: 1,
		Observer: stepLine{line},
	})
	// Sent now: decided with the ledger, as the worker decides a message
	// sent now (the stale rule, held messages), and nothing recorded.
	res := p.Apply(ctx, []pipeline.Job{{Request: request, SentAt: time.Now()}})[0]
	line.Clear()
	if res.Err != nil {
		if r, ok := reject.As(res.Err); ok {
			fmt.Fprintf(stderr, "tenant-worker plan: the worker would refuse this message: %s: %v\n", r.Reason, r.Err)
			return 1
		}
		fmt.Fprintf(stderr, "tenant-worker plan: %v\n", res.Err)
		return 1
	}
	if res.Held {
		fmt.Fprintf(stdout, "held: %s (%s at %s); it would change nothing now\n", res.Message, opts.GitBranch, repo.Head())
		return 3
	}
	if res.Stale {
		fmt.Fprintf(stdout, "stale: %s: the ledger holds a change to what it names sent after now (are the clocks apart?)\n", res.Message)
		return 0
	}
	if !res.Applied || res.Recorded {
		fmt.Fprintf(stdout, "nothing to change: %s is already carried out on %s (%s)\n", res.Message, opts.GitBranch, repo.Head())
		return 0
	}
	diff, err := repo.Diff(repo.Head(), res.Commit)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker plan: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "# %s\n# on %s at %s; nothing was pushed\n%s", res.Message, opts.GitBranch, repo.Head(), diff)
	return 0
}

// openRepo validates the git settings and clones the branch, showing
// progress. It returns nil and an exit code on failure.
func openRepo(ctx context.Context, cmd string, opts config.Options, line *progress.Line, stderr io.Writer) (*gitrepo.Repo, int) {
	if err := opts.ValidateGroups(config.Git); err != nil {
		fmt.Fprintf(stderr, "tenant-worker %s: invalid settings:\n%v\n", cmd, err)
		return nil, 2
	}
	creds, err := opts.Credentials(redact.Add)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker %s: %v\n", cmd, err)
		return nil, 2
	}
	line.Show("cloning %s", opts.GitRepoURL)
	repo, err := gitrepo.Open(ctx, app.RepoOptions(opts, creds))
	line.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker %s: %v\n", cmd, err)
		return nil, 1
	}
	return repo, 0
}

// stepLine shows the pipeline's steps on the progress line.
type stepLine struct{ line *progress.Line }

func (s stepLine) StepStarted(_ []pipeline.Job, step pipeline.Step) { s.line.Show("%s", step) }
func (stepLine) LockWaited(time.Duration)                           {}
func (stepLine) StepDone(pipeline.Step, time.Duration)              {}
func (stepLine) Pushed(pipeline.PushResult)                         {}

const planUsage = `Usage: tenant-worker plan onboarding|offboarding|deployment [flags]

Run the worker's pipeline on a message without pushing: clone the branch,
render the change, commit it in memory and check it the way Flux will read
it (kustomize build, HelmRelease decoding), then print the diff it would
push. It is decided with the ledger as a message sent now. Exit 0 with a
diff or "nothing to change", 1 if the worker would refuse the message (the
reason is printed), 3 if it would hold it until a message sent before it
arrives, 2 for bad flags.

Example:
  tenant-worker plan onboarding --tenant-id tenant-1 --tier premium --release 0.0

Flags:
`
