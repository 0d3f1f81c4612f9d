package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestComposeSSH loads docker-compose.yaml with docker-compose.ssh.yaml:
// the worker's settings are those of a deploy key and pinned host keys,
// all accepted, and init writes the files the worker reads.
func TestComposeSSH(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir: root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yaml")},
			{Filename: filepath.Join(root, "docker-compose.ssh.yaml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("tenant-worker", true) })
	if err != nil {
		t.Fatalf("load the SSH variant: %v", err)
	}
	w, err := p.GetService("worker")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range w.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	o := checkSettings(t, "the compose worker over SSH", env)
	if !strings.HasPrefix(o.GitRepoURL, "ssh://") || o.GitTokenFile != "" {
		t.Errorf("the SSH variant's worker: %s, token file %q", o.GitRepoURL, o.GitTokenFile)
	}
	init, err := p.GetService("init")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"GIT_SSH_KEY_FILE": o.GitSSHKeyFile, "GIT_KNOWN_HOSTS_FILE": o.GitKnownHostsFile} {
		if v := init.Environment[k]; v == nil || *v != want {
			t.Errorf("init writes %s to %v, the worker reads %s", k, v, want)
		}
	}
}

// TestCompose loads docker-compose.yaml with compose-go (the loader Docker
// Compose itself uses) and checks the services, their ordering, ports, and
// that the worker gets every setting it reads.
func TestCompose(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yaml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("tenant-worker", true) })
	if err != nil {
		t.Fatalf("load docker-compose.yaml: %v", err)
	}
	want := []string{"gitea", "gitea-init", "init", "localstack", "worker"}
	if got := p.ServiceNames(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("services %v, want %v", got, want)
	}
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Ordering: gitea healthy -> gitea-init done; localstack healthy and
	// gitea-init done -> init done -> worker.
	order := map[string]map[string]string{
		"gitea-init": {"gitea": types.ServiceConditionHealthy},
		"init":       {"localstack": types.ServiceConditionHealthy, "gitea-init": types.ServiceConditionCompletedSuccessfully},
		"worker":     {"init": types.ServiceConditionCompletedSuccessfully},
	}
	for name, deps := range order {
		got := svc(name).DependsOn
		for dep, cond := range deps {
			if got[dep].Condition != cond {
				t.Errorf("%s must wait for %s to be %s, waits for %q", name, dep, cond, got[dep].Condition)
			}
		}
	}
	for _, name := range []string{"gitea", "localstack"} {
		if svc(name).HealthCheck == nil || len(svc(name).HealthCheck.Test) == 0 {
			t.Errorf("%s has no health check; the services waiting on it would start at once", name)
		}
	}

	// Images pinned; the worker built from the Dockerfile.
	for _, s := range p.Services {
		if s.Name == "worker" {
			if s.Build == nil || s.Build.Dockerfile != "Dockerfile" {
				t.Errorf("the worker is not built from the Dockerfile: %+v", s.Build)
			}
			continue
		}
		if !regexp.MustCompile(`^[\w./-]+:\d[\w.-]*$`).MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to a version", s.Name, s.Image)
		}
	}

	// Ports only on loopback.
	for _, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes port %d on %q, not loopback", s.Name, port.Target, port.HostIP)
			}
		}
	}
	if ports := svc("worker").Ports; len(ports) != 1 || ports[0].Target != 8080 {
		t.Errorf("worker ports %+v", ports)
	}

	// The worker: every setting set and accepted, the token as a file from
	// the volume gitea-init writes, a grace period above SHUTDOWN_GRACE.
	w := svc("worker")
	env := map[string]string{}
	for k, v := range w.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	o := checkSettings(t, "the compose worker", env)
	if w.StopGracePeriod == nil || time.Duration(*w.StopGracePeriod) <= o.ShutdownGrace {
		t.Errorf("stop_grace_period %v is not above SHUTDOWN_GRACE %s", w.StopGracePeriod, o.ShutdownGrace)
	}
	if !w.ReadOnly {
		t.Error("the worker's root filesystem is writable")
	}
	if !mountsUnder(w, "secrets", o.GitTokenFile, true) || !mountsUnder(w, "clone", o.GitCloneDir, false) {
		t.Errorf("GIT_TOKEN_FILE %s or GIT_CLONE_DIR %s is not on its volume: %+v", o.GitTokenFile, o.GitCloneDir, w.Volumes)
	}
	if env["AWS_ENDPOINT_URL_SQS"] != "http://localstack:4566" || !strings.HasPrefix(o.GitRepoURL, "http://gitea:3000/") {
		t.Errorf("the worker does not use the stack's LocalStack and Gitea: %s, %s", env["AWS_ENDPOINT_URL_SQS"], o.GitRepoURL)
	}

	// init creates the queues the worker consumes, and reads the token
	// from the same file.
	initEnv := svc("init").Environment
	if v := initEnv["GIT_TOKEN_FILE"]; v == nil || *v != o.GitTokenFile {
		t.Errorf("init reads the token from %v, the worker from %s", v, o.GitTokenFile)
	}
	for name, cfg := range p.Configs {
		if _, err := os.Stat(cfg.File); err != nil {
			t.Errorf("config %s: %v", name, err)
		}
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy/compose/init.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{o.OnboardingQueue, o.OffboardingQueue, o.DeploymentQueue, o.ResultsQueue} {
		if !strings.Contains(string(script), q) {
			t.Errorf("init does not create queue %s", q)
		}
	}
	if !strings.Contains(string(script), "RedrivePolicy") {
		t.Error("init creates the queues without a redrive policy")
	}
	if !strings.Contains(o.GitRepoURL, "/admin/eks-saas-gitops.git") || !strings.Contains(string(script), "eks-saas-gitops") {
		t.Errorf("init seeds another repository than %s", o.GitRepoURL)
	}
}

func mountsUnder(s types.ServiceConfig, volume, path string, readOnly bool) bool {
	for _, v := range s.Volumes {
		if v.Source == volume && v.ReadOnly == readOnly && strings.HasPrefix(path, strings.TrimSuffix(v.Target, "/")+"/") {
			return true
		}
	}
	return false
}
