package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/progress"
	"github.com/tenant-worker/tenant-worker/internal/queue"
	"github.com/tenant-worker/tenant-worker/internal/results"
)

func sendCmd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlags("send", sendUsage, stdout, stderr)
	opts := config.Default()
	opts.BindGroups(fs, getenv, config.Queues)
	var req requestFlags
	req.bind(fs)
	wait := fs.Bool("wait", false, "wait for the result event on RESULTS_QUEUE; exit 1 unless the change is applied or already done")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long --wait waits (15m with --until ready, unless set)")
	until := fs.String("until", "applied", "with --wait: applied (the change is on the branch) or ready (the worker's readiness event: the tenant is running, or why not)")
	asJSON := fs.Bool("json", false, "print the result event as JSON (with --wait)")
	kind, code, done := parseKind(fs, args, stderr)
	if done {
		return code
	}
	body, _, err := req.message(kind)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: refused, nothing sent: %v\n", err)
		return 2
	}
	if err := opts.ValidateGroups(config.Queues); err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: invalid settings:\n%v\n", err)
		return 2
	}
	if *until != "applied" && *until != "ready" {
		fmt.Fprintf(stderr, "tenant-worker send: --until must be applied or ready, not %q\n", *until)
		return 2
	}
	if *wait && opts.ResultsQueue == "" {
		fmt.Fprintln(stderr, "tenant-worker send: --wait needs RESULTS_QUEUE (or --results-queue), the queue the worker publishes results to")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	api, err := sqsClient(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: %v\n", err)
		return 1
	}
	_, url, err := queue.Locate(ctx, api, opts.Queue(kind))
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: %v\n", err)
		return 1
	}
	out, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: send to %s: %v\n", opts.Queue(kind), err)
		return 1
	}
	id := aws.ToString(out.MessageId)
	fmt.Fprintln(stdout, id)
	if !*wait {
		return 0
	}

	_, resultsURL, err := queue.Locate(ctx, api, opts.ResultsQueue)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: %v\n", err)
		return 1
	}
	if *until == "ready" && !flagSet(fs, "timeout") {
		*timeout = 15 * time.Minute
	}
	wctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("no result after %s", *timeout))
	defer cancel()
	line := progress.New(stderr)
	print := func(ev results.Event) {
		if *asJSON {
			b, _ := json.Marshal(ev)
			fmt.Fprintln(stdout, string(b))
		} else {
			fmt.Fprintln(stdout, describeEvent(ev))
		}
	}
	line.Show("waiting for the worker to handle %s", id)
	notReadiness := func(e results.Event) bool { return !slices.Contains(results.Readiness, e.Outcome) }
	ev, err := results.Wait(wctx, api, resultsURL, id, notReadiness, func() { line.Show("waiting for the worker to handle %s", id) })
	line.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: %v\n", err)
		return 1
	}
	print(ev)
	if ev.Outcome == "rejected" {
		return 1
	}
	if ev.Outcome == "held" {
		return 3 // not carried out yet: it waits for a message sent before it
	}
	if *until != "ready" || ev.Outcome != "applied" {
		// Only an applied change is followed into the cluster.
		return 0
	}
	isReadiness := func(e results.Event) bool { return !notReadiness(e) }
	line.Show("waiting for %s to be ready in the cluster", id)
	ev, err = results.Wait(wctx, api, resultsURL, id, isReadiness, func() { line.Show("waiting for %s to be ready in the cluster", id) })
	line.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: %v (is READINESS on, with cluster access, for the worker?)\n", err)
		return 1
	}
	print(ev)
	if ev.Outcome != "ready" {
		return 1
	}
	return 0
}

// flagSet reports whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// describeEvent says what happened to a message, in one line.
func describeEvent(ev results.Event) string {
	who := strings.TrimSpace(ev.TenantID + " " + ev.Tier)
	switch ev.Outcome {
	case "applied":
		return fmt.Sprintf("applied: %s %s in commit %s (%d ms)", ev.Kind, who, ev.CommitSHA, ev.DurationMS)
	case "noop":
		return fmt.Sprintf("already done: %s %s, nothing to change (head %s)", ev.Kind, who, ev.CommitSHA)
	case "held":
		return fmt.Sprintf("held: %s %s: %s (ledger commit %s)", ev.Kind, who, ev.Error, ev.CommitSHA)
	case "ready":
		return fmt.Sprintf("ready: %s %s is live in the cluster (commit %s; %s)", ev.Kind, who, ev.CommitSHA, describeStages(ev.Stages))
	default:
		return fmt.Sprintf("%s: %s %s: %s: %s", ev.Outcome, ev.Kind, who, ev.Reason, ev.Error)
	}
}

// describeStages says how long each stage took after the push.
func describeStages(s *results.Stages) string {
	if s == nil {
		return "no stage times"
	}
	var parts []string
	for _, st := range []struct {
		name string
		ms   int64
	}{{"fetched", s.FetchedMS}, {"applied", s.AppliedMS}} {
		if st.ms > 0 {
			parts = append(parts, fmt.Sprintf("%s after %d ms", st.name, st.ms))
		}
	}
	parts = append(parts, fmt.Sprintf("done after %d ms", s.DoneMS))
	return strings.Join(parts, ", ")
}

// sqsClient builds an SQS client the standard SDK way (AWS_REGION,
// AWS_ENDPOINT_URL_SQS, the credentials chain).
func sqsClient(ctx context.Context) (*sqs.Client, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	return sqs.NewFromConfig(cfg), nil
}

// parse parses flags placed before or after the arguments (`send
// onboarding --tenant-id x` as well as `send --tenant-id x onboarding`);
// the arguments are left in fs.Args(). done is true when the command must
// return code.
func parse(fs *flag.FlagSet, args []string) (code int, done bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0, true
			}
			return 2, true
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	_ = fs.Parse(append([]string{"--"}, positional...))
	return 0, false
}

const sendUsage = `Usage: tenant-worker send onboarding|offboarding|deployment [flags]

Send a tenant message to its queue, as the reference's tenant-control.sh
does, and print its message id. The message is checked first: a bad one is
refused here, and nothing is sent. With --wait, wait for the worker's result
event (RESULTS_QUEUE must be set, for the worker too) and print the outcome;
with --until ready, also for its readiness event: the tenant is running in
the cluster (exit 0), or Flux's reason why not (exit 1).

Examples:
  tenant-worker send onboarding --tenant-id tenant-1 --tier premium --release 0.0 --wait
  tenant-worker send onboarding --tenant-id tenant-2 --tier basic --release 0.0 --wait --until ready
  tenant-worker send deployment --tier basic --release 1.0
  tenant-worker send offboarding --tenant-id tenant-1 --tier premium

Flags:
`
