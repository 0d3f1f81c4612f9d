package integration

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	fluxsig "github.com/fluxcd/pkg/git/signature"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// signingKey is a key made by the tool a platform team would use (gpg or
// ssh-keygen), with what git needs to verify its signatures.
type signingKey struct {
	file, passFile string
	fingerprint    string   // as the worker should log it
	public         string   // armored OpenPGP public key or authorized_keys line
	gitEnv         []string // environment of `git verify-commit`
	gitArgs        []string // options of `git verify-commit`
}

const keyPassphrase = "correct horse battery staple"

func gpgKey(t *testing.T) signingKey {
	t.Helper()
	// gpg-agent's socket lives in GNUPGHOME: keep its path short.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), "GNUPGHOME="+home)
		_ = kill.Run()
		_ = os.RemoveAll(home)
	})
	gpg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--passphrase", keyPassphrase}, args...)...)
		cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v\n%s (make test installs Debian's gnupg)", args, err, stderr.String())
		}
		return string(out)
	}
	gpg("--quick-gen-key", "Tenant Worker <worker@example.com>", "ed25519", "sign", "never")
	k := signingKey{gitEnv: []string{"GNUPGHOME=" + home}}
	for _, line := range strings.Split(gpg("--with-colons", "--list-secret-keys"), "\n") {
		if f := strings.Split(line, ":"); f[0] == "fpr" && k.fingerprint == "" {
			k.fingerprint = f[9]
		}
	}
	dir := t.TempDir()
	k.file, k.passFile = filepath.Join(dir, "signing.asc"), filepath.Join(dir, "passphrase")
	write(t, k.file, gpg("--armor", "--export-secret-keys", "worker@example.com"))
	write(t, k.passFile, keyPassphrase+"\n")
	k.public = gpg("--armor", "--export", "worker@example.com")
	return k
}

func sshSigningKey(t *testing.T) signingKey {
	t.Helper()
	return sshSigningKeyWith(t, keyPassphrase)
}

// sshSigningKeyWith is sshSigningKey with the given passphrase.
func sshSigningKeyWith(t *testing.T, passphrase string) signingKey {
	t.Helper()
	dir := t.TempDir()
	k := signingKey{file: filepath.Join(dir, "id_ed25519"), passFile: filepath.Join(dir, "passphrase")}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-C", "worker@example.com", "-N", passphrase, "-f", k.file).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s (make test installs Debian's openssh-client)", err, out)
	}
	write(t, k.passFile, passphrase+"\n")
	pub, err := os.ReadFile(k.file + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	k.public = string(pub)
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", k.file+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	k.fingerprint = strings.Fields(string(out))[1]
	allowed := filepath.Join(dir, "allowed_signers")
	write(t, allowed, "worker@example.com "+strings.TrimSpace(k.public)+"\n")
	k.gitArgs = []string{"-c", "gpg.ssh.allowedSignersFile=" + allowed}
	return k
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSignedCommitsVerify runs the worker binary with a passphrase-protected
// key made by gpg, then by ssh-keygen. Its first push loses a race to a
// foreign commit, so a commit is re-rendered and re-signed; every push is
// the worker's own thin pack of the commits it wrote. Every commit the worker wrote must then pass `git
// verify-commit` and Flux's own verifier, and the foreign, unsigned commit
// must fail both (the verifiers really check).
func TestSignedCommitsVerify(t *testing.T) {
	for _, c := range []struct {
		name string
		key  func(*testing.T) signingKey
		ssh  bool
	}{{"openpgp", gpgKey, false}, {"ssh", sshSigningKey, true}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, true)
			k := c.key(t)
			var raced atomic.Int32
			foreign := make(chan error, 1)
			h.git.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-receive-pack") && raced.Add(1) == 1 {
					foreign <- h.git.WriteFile(repoName, "main", "unrelated/race.txt", "x\n", "Foreign commit, not signed")
				}
				return true
			})
			p := h.startBinary("GIT_SIGNING_KEY_FILE="+k.file, "GIT_SIGNING_PASSPHRASE_FILE="+k.passFile, "SQS_MAX_MESSAGES=5", "MAX_BATCH=5", "GIT_AUTHOR_NAME=tenant-worker")
			start := p.logs.lines("message", "signing every commit")
			if len(start) != 1 || start[0]["fingerprint"] != k.fingerprint {
				t.Fatalf("start log %v, want the key's fingerprint %s", start, k.fingerprint)
			}
			first := h.outcome(h.send(h.q.onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`))
			if err := <-foreign; err != nil {
				t.Fatal(err)
			}
			if first["message"] != "tenant change pushed" || first["attempts"] != float64(2) {
				t.Fatalf("planned fault did not occur: the first push was not lost to the foreign commit: %v", first)
			}
			var ids []string
			for i := 2; i <= 4; i++ {
				ids = append(ids, h.send(h.q.onboarding, fmt.Sprintf(`{"tenant_id":"tenant-%d","tenant_tier":"basic","release_version":"0.0"}`, i)))
			}
			ids = append(ids, h.send(h.q.deployment, `{"tenant_tier":"basic","release_version":"1.0"}`))
			for _, id := range ids {
				if l := h.outcome(id); l["message"] != "tenant change pushed" {
					t.Fatalf("outcome: %v", l)
				}
			}
			if strings.Contains(p.logs.String(), keyPassphrase) {
				t.Fatal("the passphrase is in the log")
			}

			commits := strings.Fields(h.gitOut("log", "--format=%H", "--author=tenant-worker", "main"))
			if len(commits) < 5 {
				t.Fatalf("%d worker commits, want at least 5", len(commits))
			}
			foreignCommit := strings.TrimSpace(h.gitOut("log", "-1", "--format=%H", "--grep=Foreign commit", "main"))
			repo, err := git.PlainOpen(h.git.RepoPath(repoName))
			if err != nil {
				t.Fatal(err)
			}
			for _, hash := range commits {
				if out, err := h.verifyCommit(k, hash); err != nil || !strings.Contains(out, "Good") {
					t.Errorf("git verify-commit %s: %v\n%s", hash, err, out)
				}
				if err := fluxVerify(repo, hash, k.public, c.ssh); err != nil {
					t.Errorf("Flux's verifier refuses %s: %v", hash, err)
				}
			}
			if out, err := h.verifyCommit(k, foreignCommit); err == nil {
				t.Errorf("git verify-commit accepts the unsigned foreign commit:\n%s", out)
			}
			if err := fluxVerify(repo, foreignCommit, k.public, c.ssh); err == nil {
				t.Error("Flux's verifier accepts the unsigned foreign commit")
			}
		})
	}
}

// verifyCommit runs `git verify-commit` in the server's repository.
func (h *harness) verifyCommit(k signingKey, hash string) (string, error) {
	cmd := exec.Command("git", append(append(k.gitArgs, "verify-commit", "-v"), hash)...)
	cmd.Dir = h.git.RepoPath(repoName)
	cmd.Env = append(os.Environ(), k.gitEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fluxVerify checks a commit the way source-controller does for
// spec.verify: the signature over the commit encoded without it.
func fluxVerify(repo *git.Repository, hash, public string, ssh bool) error {
	c, err := repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return err
	}
	obj := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(obj); err != nil {
		return err
	}
	rd, err := obj.Reader()
	if err != nil {
		return err
	}
	payload, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	if ssh {
		_, err = fluxsig.VerifySSHSignature(c.PGPSignature, payload, public)
	} else {
		_, err = fluxsig.VerifyPGPSignature(c.PGPSignature, payload, public)
	}
	return err
}

// TestBadSigningKeyStopsStart: a key that does not load (the public half, a
// wrong passphrase) stops the worker before it takes a message, with the
// reason, and without the passphrase in what it prints.
func TestBadSigningKeyStopsStart(t *testing.T) {
	h := newHarness(t, true)
	k := sshSigningKey(t)
	wrong := filepath.Join(t.TempDir(), "wrong")
	write(t, wrong, keyPassphrase+" but wrong\n")
	for name, env := range map[string][]string{
		"public key":       {"GIT_SIGNING_KEY_FILE=" + k.file + ".pub"},
		"wrong passphrase": {"GIT_SIGNING_KEY_FILE=" + k.file, "GIT_SIGNING_PASSPHRASE_FILE=" + wrong},
		"no passphrase":    {"GIT_SIGNING_KEY_FILE=" + k.file},
		"missing file":     {"GIT_SIGNING_KEY_FILE=" + k.file + ".missing"},
	} {
		h.cliEnv = append(env, "HTTP_ADDR=127.0.0.1:0")
		out, errOut, code := h.cli("", "run")
		if code != 2 || !strings.Contains(errOut, "GIT_SIGNING_KEY_FILE") || strings.Contains(out+errOut, "consuming queue") {
			t.Errorf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
		if strings.Contains(out+errOut, keyPassphrase) {
			t.Errorf("%s: the passphrase is in the output", name)
		}
	}
}
