// Package config holds the worker's settings. Every setting is a flag and an
// environment variable (the flag wins); the git token is the exception: it is
// read only from GIT_TOKEN or the file GIT_TOKEN_FILE names, never from a
// flag, so it cannot show up in a process list.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/tenant-worker/tenant-worker/internal/credentials"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/signing"
)

// Options are the worker's settings.
type Options struct {
	OnboardingQueue  string
	OffboardingQueue string
	DeploymentQueue  string

	GitRepoURL string
	GitBranch  string
	// GitLedgerBranch holds the worker's ledger, moved with GitBranch in
	// one atomic push; Flux never reads it.
	GitLedgerBranch string
	GitUsername     string
	GitToken        string
	GitTokenFile    string
	// GitSigningKeyFile holds an armored OpenPGP or an OpenSSH private key;
	// when set, every commit is signed with it.
	// GitSSHKeyFile, with GitKnownHostsFile, authenticates an ssh:// or
	// scp-like GIT_REPO_URL with a deploy key; host keys are pinned.
	GitSSHKeyFile            string
	GitSSHKeyPassphraseFile  string
	GitKnownHostsFile        string
	GitSigningKeyFile        string
	GitSigningPassphraseFile string
	GitAuthorName            string
	GitAuthorEmail           string
	GitopsRoot               string
	GitCloneDir              string
	GitTimeout               time.Duration
	PushAttempts             int

	WaitTime          time.Duration
	MaxMessages       int
	MaxBatch          int
	VisibilityTimeout time.Duration
	RetryDelay        time.Duration
	MaxRetryDelay     time.Duration
	ShutdownGrace     time.Duration
	QueueStatsEvery   time.Duration
	ProbeMaxDelay     time.Duration
	ResultsQueue      string
	RunHistory        int
	// Hold is how long a message that, in send order, does not fit where
	// its tenant is waits for a message sent before it; 0: the ledger's
	// retention.
	Hold time.Duration

	// Readiness follows each pushed change into the cluster: "auto" when
	// the worker has cluster access (in-cluster, or Kubeconfig), "off".
	Readiness          string
	Kubeconfig         string
	ReadyTimeout       time.Duration
	FluxNamespace      string
	FluxGitRepository  string
	FluxKustomizations string // comma-separated
	// FluxReconcile asks Flux to reconcile after each push
	// (reconcile.fluxcd.io/requestedAt) instead of waiting for its interval.
	FluxReconcile bool
	// ReadinessRecord names the ConfigMap in FluxNamespace where every
	// replica records the messages whose readiness outcome was published,
	// so that a restart publishes none twice; empty for none.
	ReadinessRecord string
	// ArtifactURL, when set, makes the worker publish one ExternalArtifact
	// per shard folder (in a layout whose shard folders have Kustomizations
	// of their own): the URL kustomize-controller reaches ArtifactAddr at.
	ArtifactURL  string
	ArtifactAddr string
	// ArtifactInterval is the interval of the shard Kustomizations the
	// worker makes (zero: the tenants Kustomization's).
	ArtifactInterval time.Duration

	HTTPAddr  string
	LogLevel  string
	LogFormat string

	envErrs []error
}

// Default returns the settings of the reference platform.
func Default() Options {
	return Options{
		OnboardingQueue:    "argoworkflows-onboarding-queue",
		OffboardingQueue:   "argoworkflows-offboarding-queue",
		DeploymentQueue:    "argoworkflows-deployment-queue",
		GitBranch:          "main",
		GitLedgerBranch:    "tenant-worker/ledger",
		GitUsername:        "admin",
		GitAuthorName:      "admin",
		GitAuthorEmail:     "admin@example.com",
		GitopsRoot:         "application-plane/production",
		GitTimeout:         30 * time.Second,
		PushAttempts:       10,
		WaitTime:           20 * time.Second,
		MaxMessages:        10,
		MaxBatch:           0, // MaxBatchLimit, or RUN_HISTORY if lower: see Validate
		VisibilityTimeout:  30 * time.Second,
		RetryDelay:         10 * time.Second,
		MaxRetryDelay:      15 * time.Minute,
		ShutdownGrace:      30 * time.Second,
		QueueStatsEvery:    30 * time.Second,
		ProbeMaxDelay:      30 * time.Second,
		RunHistory:         2000,
		Readiness:          "auto",
		ReadyTimeout:       10 * time.Minute,
		FluxNamespace:      "flux-system",
		FluxGitRepository:  "flux-system",
		FluxKustomizations: "dataplane-tenants,dataplane-pooled-envs",
		FluxReconcile:      true,
		ReadinessRecord:    "tenant-worker-readiness",
		ArtifactAddr:       ":8081",
		ArtifactInterval:   10 * time.Minute,
		HTTPAddr:           ":8080",
		LogLevel:           "info",
		LogFormat:          "json",
	}
}

// Bind registers every setting on fs, taking defaults from the environment
// through getenv. Bad environment values are reported by Validate.
func (o *Options) Bind(fs *flag.FlagSet, getenv func(string) string) {
	o.BindGroups(fs, getenv, Queues|Git|Worker)
}

// Batch is the batch MAX_BATCH asks for: itself, or for 0 (the default)
// as large as allowed or as the history kept, if less (RUN_HISTORY set
// alone below 1,000 keeps working, as it did beside the former default of
// 500), never less than a receive. A MAX_BATCH set above RUN_HISTORY is
// refused by Validate, not lowered.
func (o Options) Batch() int {
	if o.MaxBatch != 0 {
		return o.MaxBatch
	}
	if o.RunHistory >= 1 {
		return max(min(MaxBatchLimit, o.RunHistory), o.MaxMessages)
	}
	return MaxBatchLimit
}

// MaxBatchLimit is the most MAX_BATCH allows, and the batch when it is 0
// (the default) and RUN_HISTORY holds it: a batch of 1,000 new tenants took
// the worker 2.5 s and 450 MB of memory (docs/performance.md), and its
// messages wait for the whole batch.
const MaxBatchLimit = 1000

// Group is a set of settings, for commands that need only some.
type Group int

// The groups of settings.
const (
	// Queues are the three queue names and RESULTS_QUEUE.
	Queues Group = 1 << iota
	// Git is the repository, its credentials and GITOPS_ROOT.
	Git
	// Worker is everything else: SQS tuning, retries, HTTP, logs.
	Worker
)

// BindGroups registers the settings of groups on fs, as Bind does.
func (o *Options) BindGroups(fs *flag.FlagSet, getenv func(string) string, groups Group) {
	str := func(p *string, name, env, usage string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, name, *p, fmt.Sprintf("%s (env %s)", usage, env))
	}
	dur := func(p *time.Duration, name, env, usage string) {
		fromEnv(o, getenv(env), env, p, time.ParseDuration)
		fs.DurationVar(p, name, *p, fmt.Sprintf("%s (env %s)", usage, env))
	}
	num := func(p *int, name, env, usage string) {
		fromEnv(o, getenv(env), env, p, strconv.Atoi)
		fs.IntVar(p, name, *p, fmt.Sprintf("%s (env %s)", usage, env))
	}
	boolean := func(p *bool, name, env, usage string) {
		fromEnv(o, getenv(env), env, p, strconv.ParseBool)
		fs.BoolVar(p, name, *p, fmt.Sprintf("%s (env %s)", usage, env))
	}
	if groups&Queues != 0 {
		str(&o.OnboardingQueue, "onboarding-queue", "ONBOARDING_QUEUE", "onboarding queue name or URL")
		str(&o.OffboardingQueue, "offboarding-queue", "OFFBOARDING_QUEUE", "offboarding queue name or URL")
		str(&o.DeploymentQueue, "deployment-queue", "DEPLOYMENT_QUEUE", "deployment queue name or URL")
		str(&o.ResultsQueue, "results-queue", "RESULTS_QUEUE", "queue name or URL for one result event per finished message; empty publishes none")
	}
	if groups&Git != 0 {
		str(&o.GitRepoURL, "git-repo-url", "GIT_REPO_URL", "GitOps repository URL, without credentials (required)")
		str(&o.GitBranch, "git-branch", "GIT_BRANCH", "branch Flux watches")
		str(&o.GitLedgerBranch, "git-ledger-branch", "GIT_LEDGER_BRANCH", "branch holding the worker's ledger (send times, message ids), moved with GIT_BRANCH in one atomic push")
		str(&o.GitUsername, "git-username", "GIT_USERNAME", "user name sent with the token")
		str(&o.GitTokenFile, "git-token-file", "GIT_TOKEN_FILE", "file holding the git token (or set GIT_TOKEN; there is no token flag)")
		str(&o.GitSSHKeyFile, "git-ssh-key-file", "GIT_SSH_KEY_FILE", "OpenSSH private key (a deploy key) for an ssh:// or user@host:path GIT_REPO_URL")
		str(&o.GitSSHKeyPassphraseFile, "git-ssh-key-passphrase-file", "GIT_SSH_KEY_PASSPHRASE_FILE", "file holding the SSH key's passphrase, if it is encrypted")
		str(&o.GitKnownHostsFile, "git-known-hosts-file", "GIT_KNOWN_HOSTS_FILE", "known_hosts file pinning the SSH server's host keys (required with SSH; no host key is accepted otherwise)")
		str(&o.GitSigningKeyFile, "git-signing-key-file", "GIT_SIGNING_KEY_FILE", "file holding an armored OpenPGP or an OpenSSH private key that signs every commit; empty signs none")
		str(&o.GitSigningPassphraseFile, "git-signing-passphrase-file", "GIT_SIGNING_PASSPHRASE_FILE", "file holding the signing key's passphrase, if it is encrypted")
		str(&o.GitAuthorName, "git-author-name", "GIT_AUTHOR_NAME", "commit author name")
		str(&o.GitAuthorEmail, "git-author-email", "GIT_AUTHOR_EMAIL", "commit author email")
		str(&o.GitopsRoot, "gitops-root", "GITOPS_ROOT", "folder of tier-templates/, tenants/ and pooled-envs/ in the repository")
		str(&o.GitCloneDir, "git-clone-dir", "GIT_CLONE_DIR", "where the clone is kept; empty keeps it in memory")
		dur(&o.GitTimeout, "git-timeout", "GIT_TIMEOUT", "timeout of each fetch and push")
		o.GitToken = getenv("GIT_TOKEN")
	}
	if groups&Worker != 0 {
		num(&o.PushAttempts, "push-attempts", "PUSH_ATTEMPTS", "push attempts per message when other writers move the branch")
		dur(&o.WaitTime, "sqs-wait-time", "SQS_WAIT_TIME", "long-poll wait of each receive (at most 20s)")
		num(&o.MaxMessages, "sqs-max-messages", "SQS_MAX_MESSAGES", "messages per receive (1 to 10)")
		num(&o.MaxBatch, "max-batch", "MAX_BATCH", "messages applied together (one commit each, one push) when a backlog waits; 0: 1,000, or RUN_HISTORY if lower")
		dur(&o.VisibilityTimeout, "sqs-visibility-timeout", "SQS_VISIBILITY_TIMEOUT", "visibility timeout of received messages")
		dur(&o.RetryDelay, "retry-delay", "RETRY_DELAY", "first redelivery delay after a transient failure; doubles per receive")
		dur(&o.MaxRetryDelay, "max-retry-delay", "MAX_RETRY_DELAY", "longest redelivery delay")
		dur(&o.ShutdownGrace, "shutdown-grace", "SHUTDOWN_GRACE", "time to finish the message in hand on SIGTERM")
		dur(&o.QueueStatsEvery, "queue-stats-interval", "QUEUE_STATS_INTERVAL", "how often queue and dead-letter depths are read for metrics")
		dur(&o.ProbeMaxDelay, "probe-max-delay", "PROBE_MAX_DELAY", "longest pause between probes while git or the repository is at fault")
		num(&o.RunHistory, "run-history", "RUN_HISTORY", "finished runs kept for the status page and /api/runs")
		dur(&o.Hold, "hold", "HOLD", "how long a message that, in send order, does not fit where its tenant is (tier_conflict, tenant_not_found) waits for a message sent before it to arrive, then is rejected; 0: the longest MessageRetentionPeriod of the queues, the most it can be")
		str(&o.Readiness, "readiness", "READINESS", "follow each pushed change into the cluster and publish a second result event (ready, failed, superseded, timeout): auto (with cluster access) or off")
		str(&o.Kubeconfig, "kubeconfig", "KUBECONFIG", "kubeconfig of the cluster Flux runs in; in a pod the in-cluster configuration is used without it")
		dur(&o.ReadyTimeout, "ready-timeout", "READY_TIMEOUT", "how long a pushed change may take to be ready before its readiness event says timeout")
		str(&o.FluxNamespace, "flux-namespace", "FLUX_NAMESPACE", "namespace of the Flux GitRepository and Kustomizations")
		str(&o.FluxGitRepository, "flux-git-repository", "FLUX_GIT_REPOSITORY", "the Flux GitRepository that reads GIT_REPO_URL")
		str(&o.FluxKustomizations, "flux-kustomizations", "FLUX_KUSTOMIZATIONS", "the Flux Kustomizations that apply the tenants and pooled-envs folders, comma-separated")
		boolean(&o.FluxReconcile, "flux-reconcile", "FLUX_RECONCILE", "ask Flux to reconcile right after each push instead of at its interval")
		str(&o.ReadinessRecord, "readiness-record", "READINESS_RECORD", "ConfigMap in FLUX_NAMESPACE recording the readiness events published, so that a restart publishes none twice; empty for none")
		str(&o.ArtifactURL, "artifact-url", "ARTIFACT_URL", "URL at which Flux's kustomize-controller reaches ARTIFACT_ADDR; set, the worker publishes one ExternalArtifact per shard folder when the layout gives shard folders Kustomizations of their own; empty for none")
		str(&o.ArtifactAddr, "artifact-addr", "ARTIFACT_ADDR", "address serving the shard folders' archives when ARTIFACT_URL is set")
		dur(&o.ArtifactInterval, "artifact-interval", "ARTIFACT_INTERVAL", "interval of the shard Kustomizations the worker makes: how often each applies its folder again with nothing changed (a change is applied at once); 0 takes the tenants Kustomization's")
		str(&o.HTTPAddr, "http-addr", "HTTP_ADDR", "address serving the status page, /api/runs, /metrics, /healthz and /readyz")
		str(&o.LogLevel, "log-level", "LOG_LEVEL", "debug, info, warn or error")
		str(&o.LogFormat, "log-format", "LOG_FORMAT", "json or console")
	}
}

// fromEnv sets *p from the environment value v of env, when v is set; a
// value that does not parse is kept for Validate to report.
func fromEnv[T any](o *Options, v, env string, p *T, parse func(string) (T, error)) {
	if v == "" {
		return
	}
	t, err := parse(v)
	if err != nil {
		o.envErrs = append(o.envErrs, fmt.Errorf("%s: %w", env, err))
		return
	}
	*p = t
}

// Queue is the queue (name or URL) that carries messages of kind.
func (o *Options) Queue(kind message.Kind) string {
	return map[message.Kind]string{
		message.Onboarding: o.OnboardingQueue, message.Offboarding: o.OffboardingQueue, message.Deployment: o.DeploymentQueue,
	}[kind]
}

// Kustomizations lists FLUX_KUSTOMIZATIONS.
func (o *Options) Kustomizations() []string {
	var out []string
	for _, k := range strings.Split(o.FluxKustomizations, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// EnvNames lists every environment variable the worker reads for its
// settings, in flag order. Deploy files are checked
// against it.
func EnvNames() []string {
	var names []string
	o := Default()
	o.Bind(flag.NewFlagSet("env", flag.ContinueOnError), func(k string) string {
		names = append(names, k)
		return ""
	})
	return names
}

// Validate reports every problem at once.
func (o *Options) Validate() error { return o.ValidateGroups(Queues | Git | Worker) }

// ValidateGroups checks the settings of groups, as Validate does.
func (o *Options) ValidateGroups(groups Group) error {
	errs := append([]error{}, o.envErrs...)
	need := func(v, name string) {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	need(o.OnboardingQueue, "ONBOARDING_QUEUE")
	need(o.OffboardingQueue, "OFFBOARDING_QUEUE")
	need(o.DeploymentQueue, "DEPLOYMENT_QUEUE")
	need(o.GitBranch, "GIT_BRANCH")
	need(o.GitLedgerBranch, "GIT_LEDGER_BRANCH")
	if o.GitLedgerBranch != "" && (o.GitLedgerBranch == o.GitBranch || strings.HasPrefix(o.GitBranch, o.GitLedgerBranch)) {
		errs = append(errs, fmt.Errorf("GIT_LEDGER_BRANCH %q must be another branch than GIT_BRANCH %q, and not a prefix of it", o.GitLedgerBranch, o.GitBranch))
	}
	need(o.GitAuthorName, "GIT_AUTHOR_NAME")
	need(o.GitAuthorEmail, "GIT_AUTHOR_EMAIL")
	if groups&Git != 0 {
		errs = append(errs, repoURLErrors(o.GitRepoURL)...)
	}
	if o.GitToken != "" && o.GitTokenFile != "" {
		errs = append(errs, errors.New("set GIT_TOKEN or GIT_TOKEN_FILE, not both"))
	}
	if isSSH(o.GitRepoURL) {
		if o.GitSSHKeyFile == "" || o.GitKnownHostsFile == "" {
			errs = append(errs, errors.New("an SSH GIT_REPO_URL needs GIT_SSH_KEY_FILE and GIT_KNOWN_HOSTS_FILE (host keys are always pinned)"))
		}
		if o.GitToken != "" || o.GitTokenFile != "" {
			errs = append(errs, errors.New("GIT_TOKEN and GIT_TOKEN_FILE are for HTTP(S) URLs; an SSH GIT_REPO_URL uses GIT_SSH_KEY_FILE"))
		}
	} else if o.GitSSHKeyFile != "" || o.GitKnownHostsFile != "" || o.GitSSHKeyPassphraseFile != "" {
		errs = append(errs, errors.New("GIT_SSH_KEY_FILE, GIT_SSH_KEY_PASSPHRASE_FILE and GIT_KNOWN_HOSTS_FILE need an ssh:// or user@host:path GIT_REPO_URL"))
	}
	if o.GitSigningPassphraseFile != "" && o.GitSigningKeyFile == "" {
		errs = append(errs, errors.New("GIT_SIGNING_PASSPHRASE_FILE is set without GIT_SIGNING_KEY_FILE"))
	}
	if strings.HasPrefix(o.GitopsRoot, "/") || strings.Contains("/"+o.GitopsRoot+"/", "/../") {
		errs = append(errs, fmt.Errorf("GITOPS_ROOT %q must be a relative path inside the repository", o.GitopsRoot))
	}
	if o.MaxMessages < 1 || o.MaxMessages > 10 {
		errs = append(errs, fmt.Errorf("SQS_MAX_MESSAGES must be 1 to 10, not %d", o.MaxMessages))
	}
	o.MaxBatch = o.Batch()
	if o.MaxBatch < o.MaxMessages || o.MaxBatch > MaxBatchLimit {
		errs = append(errs, fmt.Errorf("MAX_BATCH must be 0 (the default: %d, or RUN_HISTORY if lower) or SQS_MAX_MESSAGES to %d, not %d",
			MaxBatchLimit, MaxBatchLimit, o.MaxBatch))
	}
	if o.WaitTime < 0 || o.WaitTime > 20*time.Second {
		errs = append(errs, fmt.Errorf("SQS_WAIT_TIME must be 0s to 20s, not %s", o.WaitTime))
	}
	if o.VisibilityTimeout < time.Second || o.VisibilityTimeout > 12*time.Hour {
		errs = append(errs, fmt.Errorf("SQS_VISIBILITY_TIMEOUT must be 1s to 12h, not %s", o.VisibilityTimeout))
	}
	if o.Hold < 0 {
		errs = append(errs, fmt.Errorf("HOLD must be 0 (the queues' retention) or more, not %s", o.Hold))
	}
	if o.RunHistory < 1 || o.RunHistory > 100000 {
		errs = append(errs, fmt.Errorf("RUN_HISTORY must be 1 to 100000, not %d", o.RunHistory))
	} else if o.RunHistory < o.MaxBatch {
		// A batch's runs finish together: a history smaller than a batch
		// drops some of them at once, and the readiness that comes back
		// for them later has nowhere to go.
		errs = append(errs, fmt.Errorf("RUN_HISTORY (%d) must be at least MAX_BATCH (%d): the runs of one batch finish together, "+
			"and those pushed out at once lose their readiness on the status page and /api/runs", o.RunHistory, o.MaxBatch))
	}
	if o.PushAttempts < 1 {
		errs = append(errs, fmt.Errorf("PUSH_ATTEMPTS must be at least 1, not %d", o.PushAttempts))
	}
	for name, d := range map[string]time.Duration{"GIT_TIMEOUT": o.GitTimeout, "RETRY_DELAY": o.RetryDelay,
		"MAX_RETRY_DELAY": o.MaxRetryDelay, "SHUTDOWN_GRACE": o.ShutdownGrace, "QUEUE_STATS_INTERVAL": o.QueueStatsEvery,
		"PROBE_MAX_DELAY": o.ProbeMaxDelay, "READY_TIMEOUT": o.ReadyTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, not %s", name, d))
		}
	}
	switch o.Readiness {
	case "auto", "off":
	default:
		errs = append(errs, fmt.Errorf("READINESS must be auto or off, not %q", o.Readiness))
	}
	if o.Readiness != "off" && (o.FluxNamespace == "" || o.FluxGitRepository == "" || len(o.Kustomizations()) == 0) {
		errs = append(errs, errors.New("READINESS needs FLUX_NAMESPACE, FLUX_GIT_REPOSITORY and FLUX_KUSTOMIZATIONS"))
	}
	if o.ReadinessRecord != "" && !objectName.MatchString(o.ReadinessRecord) {
		errs = append(errs, fmt.Errorf("READINESS_RECORD must be a ConfigMap name (lower-case letters, digits, '-' and '.'), not %q", o.ReadinessRecord))
	}
	if o.ArtifactURL != "" {
		if u, err := url.Parse(o.ArtifactURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("ARTIFACT_URL must be an http or https URL, not %q", o.ArtifactURL))
		}
		if o.ArtifactAddr == "" {
			errs = append(errs, errors.New("ARTIFACT_URL needs ARTIFACT_ADDR"))
		}
		if o.ArtifactInterval < 0 || o.ArtifactInterval > 0 && o.ArtifactInterval < time.Second {
			errs = append(errs, fmt.Errorf("ARTIFACT_INTERVAL must be 0 (the tenants Kustomization's) or at least 1s, not %s", o.ArtifactInterval))
		}
	}
	switch o.LogFormat {
	case "json", "console":
	default:
		errs = append(errs, fmt.Errorf("LOG_FORMAT must be json or console, not %q", o.LogFormat))
	}
	return errors.Join(errs...)
}

// Credentials returns what the git client authenticates with: the token of
// GIT_TOKEN_FILE, read again when the file changes or the server refuses
// it, or the fixed GIT_TOKEN. onSecret is called with every token read.
func (o *Options) Credentials(onSecret func(string)) (credentials.Provider, error) {
	if isSSH(o.GitRepoURL) {
		ep, err := transport.NewEndpoint(o.GitRepoURL)
		if err != nil {
			return nil, fmt.Errorf("GIT_REPO_URL: %w", err)
		}
		port := ep.Port
		if port == 0 {
			port = 22
		}
		return credentials.SSHKeyFile(ep.User, net.JoinHostPort(ep.Host, strconv.Itoa(port)),
			o.GitSSHKeyFile, o.GitSSHKeyPassphraseFile, o.GitKnownHostsFile, onSecret)
	}
	if o.GitTokenFile == "" {
		tok := strings.TrimSpace(o.GitToken)
		if onSecret != nil {
			onSecret(tok)
		}
		return credentials.Static(o.GitUsername, tok), nil
	}
	return credentials.File(o.GitUsername, o.GitTokenFile, onSecret)
}

// Signer loads the key of GIT_SIGNING_KEY_FILE; nil when signing is off.
// onSecret is called with the passphrase, if any.
func (o *Options) Signer(onSecret func(string)) (signing.Signer, error) {
	if o.GitSigningKeyFile == "" {
		return nil, nil
	}
	s, err := signing.Load(o.GitSigningKeyFile, o.GitSigningPassphraseFile, onSecret)
	if err != nil {
		return nil, fmt.Errorf("GIT_SIGNING_KEY_FILE %s: %w", o.GitSigningKeyFile, err)
	}
	return s, nil
}

// repoURLErrors checks GIT_REPO_URL.
func repoURLErrors(raw string) []error {
	if raw == "" {
		return []error{errors.New("GIT_REPO_URL is required")}
	}
	if isSSH(raw) && !strings.HasPrefix(raw, "ssh://") {
		if _, err := transport.NewEndpoint(raw); err != nil {
			return []error{errors.New("GIT_REPO_URL is not a usable user@host:path address")}
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return []error{errors.New("GIT_REPO_URL is not a URL")}
	}
	var errs []error
	if _, hasPassword := u.User.Password(); hasPassword || (u.User != nil && u.Scheme != "ssh") {
		errs = append(errs, errors.New("GIT_REPO_URL must not hold credentials: put the token in GIT_TOKEN_FILE or GIT_TOKEN"))
	}
	if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file" && u.Scheme != "ssh" {
		errs = append(errs, fmt.Errorf("GIT_REPO_URL scheme %q is not supported (http, https, ssh, user@host:path or file)", u.Scheme))
	}
	return errs
}

// scpLike matches git's scp-like SSH address, user@host:path.
var scpLike = regexp.MustCompile(`^(?:[^@/:]+@)?[^@/:]+:[^/]`)

// isSSH reports whether raw is an ssh:// URL or an scp-like address.
func isSSH(raw string) bool {
	return strings.HasPrefix(raw, "ssh://") || (!strings.Contains(raw, "://") && scpLike.MatchString(raw))
}

// objectName is a Kubernetes object name (a DNS subdomain).
var objectName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
