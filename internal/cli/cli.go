// Package cli implements the tenant-worker command line: subcommands, their
// flags and help.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/tenant-worker/tenant-worker/internal/app"
	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/logging"
	"github.com/tenant-worker/tenant-worker/internal/printable"
	"github.com/tenant-worker/tenant-worker/internal/redact"
)

const usage = `tenant-worker turns SQS tenant messages into GitOps commits.

Usage:
  tenant-worker <command> [flags]

Commands:
  run      consume the onboarding, offboarding and deployment queues
  send     send a tenant message (and with --wait, wait for its outcome)
  plan     show the commit a message would make, pushing nothing
  tenants  list tiers, tenants, chart versions and image tags
  layout   show or migrate how tenant files are laid out (shard folders)
  help     show this help

Run "tenant-worker <command> --help" for a command's flags.
`

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	// Everything printed is blanked of secrets and made inert on a
	// terminal: results and errors carry text from messages and servers.
	stdout, stderr = printable.Writer(redact.Writer(stdout)), printable.Writer(redact.Writer(stderr))
	addSecrets(getenv)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr, getenv)
	case "send":
		return sendCmd(args[1:], stdout, stderr, getenv)
	case "plan":
		return planCmd(args[1:], stdout, stderr, getenv)
	case "tenants":
		return tenantsCmd(args[1:], stdout, stderr, getenv)
	case "layout":
		return layoutCmd(args[1:], stdout, stderr, getenv)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tenant-worker: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// addSecrets hands the secrets the environment names to redact, whether or
// not the command uses them: `send` prints what a person typed and what the
// worker answered, and neither may show the token.
func addSecrets(getenv func(string) string) {
	redact.Add(getenv("GIT_TOKEN"))
	for _, file := range []string{getenv("GIT_TOKEN_FILE"), getenv("GIT_SIGNING_PASSPHRASE_FILE"), getenv("GIT_SSH_KEY_PASSPHRASE_FILE")} {
		if file == "" {
			continue
		}
		// A file that cannot be read is the command's to report, if it
		// needs the file.
		if b, err := os.ReadFile(file); err == nil {
			redact.Add(strings.TrimRight(string(b), "\r\n"))
		}
	}
}

// newFlags returns the flag set of a command: parse errors go to stderr,
// and -h or --help prints usage (then the flags) to stdout.
func newFlags(name, usage string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fs.SetOutput(stdout)
		fmt.Fprint(stdout, usage)
		fs.PrintDefaults()
	}
	return fs
}

func runCmd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlags("run", runUsage, stdout, stderr)
	opts := config.Default()
	opts.Bind(fs, getenv)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tenant-worker run: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "tenant-worker run: invalid settings:\n%v\n", err)
		return 2
	}
	// Every token read, now or after a rotation, is blanked on every surface.
	creds, err := opts.Credentials(redact.Add)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker run: %v\n", err)
		return 2
	}
	// A key that does not load stops the worker before it takes a message.
	signer, err := opts.Signer(redact.Add)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker run: %v\n", err)
		return 2
	}
	log, err := logging.New(stderr, opts.LogLevel, opts.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker run: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, app.Config{Options: opts, Credentials: creds, Logger: log, Version: Version(), Signer: signer}); err != nil {
		log.Error().Err(err).Msg("worker failed")
		return 1
	}
	return 0
}

// Version is the module version of the binary, or its VCS revision when
// built from a checkout.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

const runUsage = `Usage: tenant-worker run [flags]

Consume the three queues and apply each message to the GitOps repository.
Every flag can also be set by the environment variable named after it. AWS
settings come the standard SDK way (AWS_REGION, AWS_ENDPOINT_URL_SQS, the
credentials chain, IRSA). The git token is read only from GIT_TOKEN or
GIT_TOKEN_FILE.

Flags:
`
