package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tenant-worker/tenant-worker/internal/testenv/sshd"
)

// sshKey makes an ed25519 key with ssh-keygen (with a passphrase when pass
// is set) and returns the private key file and its public line.
func sshKeyPair(t *testing.T, pass string) (file, public string) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-C", "tenant-worker", "-N", pass, "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(file + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return file, string(pub)
}

// sshTarget is a repository served over SSH: its URL and the known_hosts
// line that pins the server.
type sshTarget struct {
	url, knownHosts string
}

// sshServers serve the harness's repository over SSH with a key that may
// write and one that may only read: OpenSSH's sshd with git-shell, or
// Gitea's built-in SSH server with deploy keys.
var sshServers = []server{"sshd", giteaServer}

func sshHarness(t *testing.T, s server, writer, reader string) (*harness, sshTarget) {
	t.Helper()
	if s == giteaServer {
		h := newHarnessOn(t, giteaServer, true)
		g := h.gitea()
		if err := g.AddDeployKey(repoName, "tenant-worker", writer, false); err != nil {
			t.Fatal(err)
		}
		if err := g.AddDeployKey(repoName, "read-only", reader, true); err != nil {
			t.Fatal(err)
		}
		kh, err := g.KnownHosts()
		if err != nil {
			t.Fatal(err)
		}
		return h, sshTarget{url: g.SSHURL(repoName), knownHosts: kh}
	}
	h := newHarnessOn(t, httpBackend, true)
	srv, err := sshd.Start(filepath.Join(t.TempDir(), "sshd"), []string{writer}, []string{reader})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		if t.Failed() {
			t.Logf("sshd log:\n%s", srv.Log())
		}
	})
	return h, sshTarget{url: srv.URL(h.git.RepoPath(repoName)), knownHosts: srv.KnownHosts()}
}

// sshEnv is the worker's environment for an SSH repository.
func sshEnv(t *testing.T, target sshTarget, keyFile, passFile, knownHosts string) []string {
	khFile := filepath.Join(t.TempDir(), "known_hosts")
	write(t, khFile, knownHosts)
	env := []string{"GIT_REPO_URL=" + target.url, "GIT_TOKEN_FILE=", "GIT_SSH_KEY_FILE=" + keyFile, "GIT_KNOWN_HOSTS_FILE=" + khFile,
		"PROBE_MAX_DELAY=200ms"}
	if passFile != "" {
		env = append(env, "GIT_SSH_KEY_PASSPHRASE_FILE="+passFile)
	}
	return env
}

// TestSSHDeployKeys runs the worker over SSH against OpenSSH's sshd with
// git-shell and against Gitea's built-in SSH server, with a
// passphrase-protected deploy key and the host key pinned: onboardings and
// a deployment are pushed (the worker's thin pack, over SSH). A wrong key,
// a read-only key and a host key not in known_hosts each pause the worker
// for its credentials with nothing pushed and nothing dead-lettered, and
// the host key error says so.
func TestSSHDeployKeys(t *testing.T) {
	t.Parallel()
	for _, s := range sshServers {
		t.Run(string(s), func(t *testing.T) {
			keyFile, pub := sshKeyPair(t, keyPassphrase)
			readFile, readPub := sshKeyPair(t, "")
			strangerFile, _ := sshKeyPair(t, "")
			h, target := sshHarness(t, s, pub, readPub)
			passFile := filepath.Join(t.TempDir(), "passphrase")
			write(t, passFile, keyPassphrase+"\n")

			p := h.startBinary(sshEnv(t, target, keyFile, passFile, target.knownHosts)...)
			fp, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", keyFile+".pub").Output()
			if err != nil {
				t.Fatal(err)
			}
			if l := p.logs.lines("message", "authenticating with an SSH deploy key"); len(l) != 1 || l[0]["fingerprint"] != strings.Fields(string(fp))[1] {
				t.Errorf("start log %v, want the deploy key's fingerprint %s", l, strings.Fields(string(fp))[1])
			}
			ids := []string{
				h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`),
				h.send(h.q.onboarding, `{"tenant_id":"tenant-2","tenant_tier":"basic","release_version":"0.0"}`),
			}
			for _, id := range ids {
				if l := h.outcome(id); l["message"] != "tenant change pushed" {
					t.Fatalf("over SSH: %v\n%s", l, tail(p.logs.String(), 3000))
				}
			}
			if l := h.outcome(h.send(h.q.deployment, `{"tenant_tier":"basic","release_version":"1.0"}`)); l["message"] != "tenant change pushed" {
				t.Fatalf("deployment over SSH: %v", l)
			}
			if got := h.file("tenants/basic/tenant-2.yaml"); !strings.Contains(got, "1.0") {
				t.Fatalf("tenant-2 after the deployment:\n%s", got)
			}
			if strings.Contains(p.logs.String(), keyPassphrase) {
				t.Fatal("the passphrase is in the log")
			}
			_ = p.cmd.Process.Kill()

			// A key the server does not know, a changed host key, a host
			// known_hosts does not list: the worker cannot even open the
			// repository. It
			// stays not ready, says why, and never connects past the host
			// key check.
			_, otherHost := sshKeyPair(t, "")
			host := strings.Fields(target.knownHosts)[0]
			for name, c := range map[string]struct {
				env  []string
				want string
			}{
				"wrong key":        {sshEnv(t, target, strangerFile, "", target.knownHosts), "the server refused the SSH key"},
				"changed host key": {sshEnv(t, target, keyFile, passFile, host+" "+otherHost), "GIT_KNOWN_HOSTS_FILE pins"},
				"unknown host":     {sshEnv(t, target, keyFile, passFile, "[192.0.2.1]:22 "+otherHost), "is unknown: GIT_KNOWN_HOSTS_FILE pins no key for this host; refusing to connect"},
			} {
				p := h.startUnready(c.env...)
				h.logs = p.logs
				h.waitFor(name+": the worker to say why it cannot open the repository", 60*time.Second, func() bool {
					for _, l := range p.logs.lines("message", "could not open the GitOps repository") {
						if strings.Contains(l["error"].(string), c.want) && strings.Contains(l["error"].(string), "git authentication failed") {
							return true
						}
					}
					return false
				})
				if strings.Contains(p.logs.String(), "consuming queue") {
					t.Errorf("%s: the worker consumes its queues", name)
				}
				_ = p.cmd.Process.Kill()
			}

			// A key that may only fetch: the worker opens the repository,
			// then pauses at the push with the server's words, pushing and
			// dead-lettering nothing.
			head := h.head()
			p = h.startBinary(sshEnv(t, target, readFile, "", target.knownHosts)...)
			id := h.send(h.q.onboarding, `{"tenant_id":"tenant-9","tenant_tier":"premium","release_version":"0.0"}`)
			h.waitFor("read-only key: the worker to pause", 60*time.Second, func() bool {
				return len(p.logs.lines("message", "still paused: the fault is still there")) >= 3
			})
			if h.head() != head || h.finished(id) {
				t.Error("read-only key: something was pushed or finished")
			}
			if got := h.drainDLQ(h.q.dlq["onboarding"]); len(got) != 0 {
				t.Errorf("read-only key: dead letters %v", got)
			}
		})
	}
}

// purge empties a queue (messages in flight included).
func (h *harness) purge(url string) {
	h.t.Helper()
	if _, err := h.api.PurgeQueue(context.Background(), &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
		h.t.Fatal(err)
	}
	h.waitFor("the queue to be empty", 10*time.Second, func() bool { return h.queueCount(url) == 0 })
}
