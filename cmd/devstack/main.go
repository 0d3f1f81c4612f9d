// Command devstack runs the whole platform loop on one machine with no
// Docker: fauxqs for SQS, git's smart-HTTP server seeded from templates/, the
// three queues with dead-letter queues, and the worker. `make run` starts it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/app"
	wcli "github.com/tenant-worker/tenant-worker/internal/cli"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/logging"
	"github.com/tenant-worker/tenant-worker/internal/testenv/fauxqs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

func main() { os.Exit(run()) }

func run() int {
	sqsPort := flag.Int("sqs-port", 9324, "port of the local SQS (fauxqs) on 127.0.0.1")
	gitAddr := flag.String("git-addr", "127.0.0.1:3000", "address of the local git server")
	httpAddr := flag.String("http-addr", "127.0.0.1:8080", "address of the worker's status page, /api/runs, /metrics, /healthz and /readyz")
	stateDir := flag.String("dir", ".tools/run", "folder for the git server's repositories (emptied at start)")
	flag.Parse()

	if err := os.RemoveAll(*stateDir); err != nil {
		return fail(err)
	}
	faux, err := fauxqs.Start(*sqsPort)
	if err != nil {
		return fail(err)
	}
	defer faux.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	api := fauxqs.Client(faux.Endpoint)
	opts := config.Default()
	opts.LogFormat = "console"
	// The local git server is no cluster's source: a KUBECONFIG in the
	// environment must not make the worker annotate that cluster's Flux
	// objects. READINESS=auto asks for it anyway.
	opts.Readiness = "off"
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	opts.Bind(fs, os.Getenv) // LOG_LEVEL, LOG_FORMAT and the rest still apply
	if opts.ResultsQueue == "" {
		opts.ResultsQueue = "tenant-worker-results"
	}
	urls := map[string]string{}
	for _, name := range []string{opts.OnboardingQueue, opts.OffboardingQueue, opts.DeploymentQueue} {
		if urls[name], err = createQueue(ctx, api, faux.Endpoint, name, 5); err != nil {
			return fail(err)
		}
	}
	if _, err := createQueue(ctx, api, faux.Endpoint, opts.ResultsQueue, 0); err != nil {
		return fail(err)
	}

	tokenBytes := make([]byte, 16)
	_, _ = rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	repos, _ := filepath.Abs(filepath.Join(*stateDir, "git"))
	git, err := gitserver.Start(repos, *gitAddr, token)
	if err != nil {
		return fail(err)
	}
	defer git.Close()
	repoURL, err := git.CreateRepo("gitops.git", opts.GitBranch, templates.FS)
	if err != nil {
		return fail(err)
	}
	opts.GitRepoURL = repoURL
	opts.GitopsRoot = templates.Root
	opts.HTTPAddr = *httpAddr
	if err := opts.Validate(); err != nil {
		return fail(err)
	}
	log, err := logging.New(os.Stderr, opts.LogLevel, opts.LogFormat, token)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fail(err)
	}
	// What the CLI needs, to source in another terminal. The token stays in
	// a file; only its path is printed.
	envFile, err := writeCLIEnv(*stateDir, faux.Endpoint, repoURL, token, opts)
	if err != nil {
		return fail(err)
	}

	cli := fmt.Sprintf("AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 aws --endpoint-url %s sqs send-message", faux.Endpoint)
	fmt.Printf(`
tenant-worker is running against a local SQS (fauxqs, %[1]s) and git server (%[2]s).

Status page: http://%[8]s/    (runs, queues, dead letters; JSON at /api/runs)

Onboard a tenant with the CLI, in another terminal, and wait for the outcome:
  . %[9]s
  bin/tenant-worker send onboarding --tenant-id tenant-1 --tier premium --release 0.0 --wait
  bin/tenant-worker send onboarding --tenant-id tenant-2 --tier gold --release 0.0 --wait   # refused: says why
  bin/tenant-worker tenants
  bin/tenant-worker plan deployment --tier basic --release 1.0                                # the diff, nothing pushed

Or exactly as the platform sends them today:
  %[3]s --queue-url %[4]s --message-body '{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}'
  %[3]s --queue-url %[6]s --message-body '{"tenant_tier":"basic","release_version":"1.0"}'
  %[3]s --queue-url %[7]s --message-body '{"tenant_id":"tenant-1","tenant_tier":"premium"}'

See the commits it pushed:
  git --git-dir %[5]s log --stat -3 main

Metrics: http://%[8]s/metrics    Stop: Ctrl-C

`, faux.Endpoint, git.URL, cli, urls[opts.OnboardingQueue], git.RepoPath("gitops.git"),
		urls[opts.DeploymentQueue], urls[opts.OffboardingQueue], ln.Addr(), envFile)

	if err := app.Run(ctx, app.Config{Options: opts, Token: token, Logger: log, Listener: ln, SQS: api, Version: wcli.Version()}); err != nil {
		return fail(err)
	}
	return 0
}

// createQueue makes name (and, with maxReceives, name-dlq with a redrive
// policy between them) and returns the queue's URL in the form easiest to
// paste.
func createQueue(ctx context.Context, api *sqs.Client, endpoint, name string, maxReceives int) (string, error) {
	q, _, err := fauxqs.CreateQueue(ctx, api, name, fauxqs.QueueOptions{MaxReceiveCount: maxReceives})
	if err != nil {
		return "", err
	}
	// fauxqs names queues http://sqs.<region>.<host>:<port>/...; the plain
	// endpoint form is easier to paste and works the same.
	u, err := url.Parse(q)
	if err != nil {
		return "", fmt.Errorf("queue URL of %s: %w", name, err)
	}
	return endpoint + u.Path, nil
}

// writeCLIEnv writes a file to source before running the CLI against this
// stack, and the token file it names; it returns the env file's path.
func writeCLIEnv(dir, endpoint, repoURL, token string, o config.Options) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	tokenFile := filepath.Join(abs, "git-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return "", err
	}
	env := fmt.Sprintf(`# Source this file to point tenant-worker's CLI at the make run stack.
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export AWS_ENDPOINT_URL_SQS=%s
export ONBOARDING_QUEUE=%s OFFBOARDING_QUEUE=%s DEPLOYMENT_QUEUE=%s RESULTS_QUEUE=%s
export GIT_REPO_URL=%s GIT_BRANCH=%s GITOPS_ROOT=%s GIT_TOKEN_FILE=%s
`, endpoint, o.OnboardingQueue, o.OffboardingQueue, o.DeploymentQueue, o.ResultsQueue,
		repoURL, o.GitBranch, o.GitopsRoot, tokenFile)
	path := filepath.Join(abs, "env")
	return path, os.WriteFile(path, []byte(env), 0o600)
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "devstack:", err)
	return 1
}
