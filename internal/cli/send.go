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
	timeout := fs.Duration("timeout", 5*time.Minute, "how long --wait waits")
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
	wctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("no result after %s", *timeout))
	defer cancel()
	line := progress.New(stderr)
	line.Show("waiting for the worker to handle %s", id)
	ev, err := results.Wait(wctx, api, resultsURL, id, func() { line.Show("waiting for the worker to handle %s", id) })
	line.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker send: %v\n", err)
		return 1
	}
	if *asJSON {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, describeEvent(ev))
	}
	if ev.Outcome == "rejected" {
		return 1
	}
	return 0
}

// describeEvent says what happened to a message, in one line.
func describeEvent(ev results.Event) string {
	who := strings.TrimSpace(ev.TenantID + " " + ev.Tier)
	switch ev.Outcome {
	case "applied":
		return fmt.Sprintf("applied: %s %s in commit %s (%d ms)", ev.Kind, who, ev.CommitSHA, ev.DurationMS)
	case "noop":
		return fmt.Sprintf("already done: %s %s, nothing to change (head %s)", ev.Kind, who, ev.CommitSHA)
	default:
		return fmt.Sprintf("%s: %s %s: %s: %s", ev.Outcome, ev.Kind, who, ev.Reason, ev.Error)
	}
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
event (RESULTS_QUEUE must be set, for the worker too) and print the outcome.

Examples:
  tenant-worker send onboarding --tenant-id tenant-1 --tier premium --release 0.0 --wait
  tenant-worker send deployment --tier basic --release 1.0
  tenant-worker send offboarding --tenant-id tenant-1 --tier premium

Flags:
`
