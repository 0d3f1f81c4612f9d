// Package gitea runs real Gitea, the platform's git server, on loopback for
// tests: built by `make gitea` from its Go module, started with a temporary
// work folder and SQLite, its admin user and tokens made with its own CLI,
// repositories made through its API, and stopped by PID. A reverse proxy in
// front of it gives tests the same request hook as gitserver.
package gitea

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/internal/testenv/loopback"
)

// Version is the Gitea release the Makefile builds.
const Version = "1.26.0"

// Owner is the user that owns the test repositories (and the admin).
const Owner = "gitops"

// Binary finds the Gitea binary: $GITEA_BIN, or .tools/gitea-<Version>/gitea
// at the root of this module (make gitea builds it there).
func Binary() (string, error) {
	if p := os.Getenv("GITEA_BIN"); p != "" {
		return p, nil
	}
	return loopback.Tool(filepath.Join("gitea-"+Version, "gitea"), "gitea")
}

// Server is a running Gitea.
type Server struct {
	// URL is the proxy in front of Gitea, which is also Gitea's ROOT_URL:
	// every URL Gitea writes (redirects among them) points here.
	URL string
	// Token may do everything; ReadToken only read repositories.
	Token, ReadToken string
	// Password is the owner's password.
	Password string
	// Root holds the bare repositories (<Root>/<owner>/<name>.git).
	Root string
	// SSHPort is Gitea's built-in SSH server's port.
	SSHPort int

	bin, work, config string
	ini               string // appended to app.ini
	gitea             string // Gitea's own address
	cmd               *exec.Cmd
	done              chan error
	proxy             *http.Server

	// Hooks sees every request before Gitea does (SetHook).
	gitserver.Hooks

	mu    sync.Mutex
	moved map[string]string
}

// Start runs Gitea with its work folder under dir.
func Start(dir string) (*Server, error) {
	return StartWith(dir, Options{})
}

// Options change Gitea's configuration.
type Options struct {
	// INI is appended to the app.ini the server writes (sections and keys
	// of Gitea's configuration cheat sheet).
	INI string
}

// StartWith is Start with o applied to Gitea's configuration.
func StartWith(dir string, o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, work: filepath.Join(dir, "gitea"), Password: randomHex(12), ini: o.INI}
	s.Root = filepath.Join(s.work, "repositories")
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	httpPort, err := loopback.FreePort()
	if err != nil {
		proxyLn.Close()
		return nil, err
	}
	if s.SSHPort, err = loopback.FreePort(); err != nil {
		proxyLn.Close()
		return nil, err
	}
	s.URL = "http://" + proxyLn.Addr().String()
	s.gitea = fmt.Sprintf("127.0.0.1:%d", httpPort)
	if err := s.writeConfig(httpPort); err != nil {
		proxyLn.Close()
		return nil, err
	}
	target, _ := url.Parse("http://" + s.gitea)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	s.proxy = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Pass(w, r) {
			rp.ServeHTTP(w, r)
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.proxy.Serve(proxyLn) }()

	if _, err := s.cli("migrate"); err != nil {
		s.Close()
		return nil, err
	}
	if _, err := s.cli("admin", "user", "create", "--username", Owner, "--password", s.Password,
		"--email", Owner+"@example.com", "--admin", "--must-change-password=false"); err != nil {
		s.Close()
		return nil, err
	}
	if s.Token, err = s.NewToken("all", "all"); err != nil {
		s.Close()
		return nil, err
	}
	if s.ReadToken, err = s.NewToken("read", "read:repository"); err != nil {
		s.Close()
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(s.work, "web.log"))
	if err != nil {
		s.Close()
		return nil, err
	}
	s.cmd = exec.Command(s.bin, "--config", s.config, "--work-path", s.work, "web")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.Env = s.env()
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with its test
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		s.Close()
		return nil, fmt.Errorf("start gitea: %w", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait(); logFile.Close() }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + s.gitea + "/api/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			log, _ := os.ReadFile(logFile.Name())
			s.Close()
			return nil, fmt.Errorf("gitea exited while starting: %v\n%s", err, tail(log))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, errors.New("gitea did not answer /api/healthz within 90s")
		}
	}
}

func (s *Server) writeConfig(httpPort int) error {
	src, err := filepath.Abs(filepath.Dir(s.bin))
	if err != nil {
		return err
	}
	s.config = filepath.Join(s.work, "custom", "conf", "app.ini")
	if err := os.MkdirAll(filepath.Dir(s.config), 0o755); err != nil {
		return err
	}
	ini := fmt.Sprintf(`I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true
APP_NAME = tenant-worker tests
RUN_MODE = prod
WORK_PATH = %[1]s

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]d
ROOT_URL = %[3]s/
OFFLINE_MODE = true
STATIC_ROOT_PATH = %[4]s
APP_DATA_PATH = %[1]s/data
DISABLE_SSH = false
START_SSH_SERVER = true
SSH_LISTEN_HOST = 127.0.0.1
SSH_LISTEN_PORT = %[5]d
SSH_PORT = %[5]d
SSH_DOMAIN = 127.0.0.1
BUILTIN_SSH_SERVER_USER = git
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db

[security]
INSTALL_LOCK = true
SECRET_KEY = %[6]s
INTERNAL_TOKEN = %[7]s

[oauth2]
ENABLED = false

[repository]
ROOT = %[8]s
DEFAULT_BRANCH = main

[service]
DISABLE_REGISTRATION = true

[indexer]
REPO_INDEXER_ENABLED = false

[cron]
ENABLED = false

[cache]
ADAPTER = memory

[session]
PROVIDER = memory

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = %[1]s/log
`, s.work, httpPort, s.URL, src, s.SSHPort, randomHex(32), "internal-"+randomHex(40), s.Root)
	return os.WriteFile(s.config, []byte(ini+s.ini), 0o600)
}

func (s *Server) env() []string {
	return append(os.Environ(), "GITEA_WORK_DIR="+s.work, "HOME="+s.work, "USER=root")
}

// cli runs a gitea subcommand with the test's configuration.
func (s *Server) cli(args ...string) (string, error) {
	cmd := exec.Command(s.bin, append([]string{"--config", s.config, "--work-path", s.work}, args...)...)
	cmd.Env = s.env()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("gitea %s: %w: %s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// NewToken makes an access token of the owner with the given scopes (as
// `gitea admin user generate-access-token --scopes` takes them).
func (s *Server) NewToken(name, scopes string) (string, error) {
	out, err := s.cli("admin", "user", "generate-access-token", "--username", Owner,
		"--token-name", name+"-"+randomHex(4), "--scopes", scopes, "--raw")
	if err != nil {
		return "", err
	}
	// Run as root, Gitea first prints a warning on stdout: the token is the
	// last line.
	lines := strings.Split(out, "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// WorkPath is Gitea's work folder: what the gitea CLI takes as
// GITEA_WORK_DIR (its configuration is in custom/conf/app.ini there).
func (s *Server) WorkPath() string { return s.work }

// Pid is the Gitea process's id: what it and the git processes it waits
// for spend is in its /proc entry.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Close stops Gitea with SIGTERM (SIGKILL after 15 s) and the proxy.
func (s *Server) Close() error {
	if s.cmd != nil {
		loopback.Stop(s.cmd, s.done, 15*time.Second)
		s.cmd = nil
	}
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	return nil
}

// API calls Gitea's REST API as the owner, with token (the admin token when
// empty), and decodes a JSON answer into out (if not nil).
func (s *Server) API(method, path, token string, in, out any) error {
	if token == "" {
		token = s.Token
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.gitea+"/api/v1"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// APIError is a non-2xx answer of the API.
type APIError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("gitea %s %s: %d %s", e.Method, e.Path, e.Status, e.Body)
}

// repo is the name Gitea knows a repository by (without .git).
func repo(name string) string { return strings.TrimSuffix(name, ".git") }

// current follows renames.
func (s *Server) current(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	name = repo(name)
	for range 100 {
		next, ok := s.moved[name]
		if !ok {
			break
		}
		name = next
	}
	return name
}

// RepoURL is the clone URL of repository name, through the proxy.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + Owner + "/" + repo(name) + ".git" }

// RepoPath is the repository's folder on disk, after any rename.
func (s *Server) RepoPath(name string) string {
	return filepath.Join(s.Root, Owner, strings.ToLower(s.current(name))+".git")
}

// CreateRepo creates repository name through the API and pushes the files
// of seed as its first commit on branch.
func (s *Server) CreateRepo(name, branch string, seed fs.FS) (string, error) {
	if err := s.API(http.MethodPost, "/user/repos", "", map[string]any{
		"name": repo(name), "default_branch": branch, "private": true,
	}, nil); err != nil {
		return "", err
	}
	remote := fmt.Sprintf("http://%s/%s/%s.git", s.gitea, Owner, repo(name))
	if err := gitserver.Seed(seed, branch, remote, "http.extraHeader=Authorization: token "+s.Token); err != nil {
		return "", errors.New(strings.ReplaceAll(err.Error(), s.Token, "[token]"))
	}
	return s.RepoURL(name), nil
}

// Output runs a git command against the repository on disk.
func (s *Server) Output(name string, args ...string) (string, error) {
	return gitserver.OutputIn(s.RepoPath(name), args...)
}

// WriteFile commits content at path on branch, as another writer would,
// and pushes it through Gitea (so its hooks and database see the push): a
// bare clone, a commit made with git's plumbing, a push; again if another
// writer moved the branch in between.
func (s *Server) WriteFile(name, branch, path, content, msg string) error {
	remote := fmt.Sprintf("http://%s/%s/%s.git", s.gitea, Owner, s.current(name))
	header := "http.extraHeader=Authorization: token " + s.Token
	var last error
	for range 20 {
		dir, err := os.MkdirTemp("", "gitea-writer-")
		if err != nil {
			return err
		}
		err = func() error {
			defer os.RemoveAll(dir)
			if err := gitserver.Git("", "-c", header, "clone", "-q", "--bare", "--single-branch", "-b", branch, remote, dir); err != nil {
				return err
			}
			if err := gitserver.CommitFile(dir, branch, path, content, msg); err != nil {
				return err
			}
			return gitserver.Git(dir, "-c", header, "push", "-q", remote, branch)
		}()
		if err == nil {
			return nil
		}
		last = errors.New(strings.ReplaceAll(err.Error(), s.Token, "[token]"))
	}
	return last
}

// Rename renames repository name to newName through the API; Gitea then
// answers the old URL with 301.
func (s *Server) Rename(name, newName string) error {
	from := s.current(name)
	if err := s.API(http.MethodPatch, "/repos/"+Owner+"/"+from, "", map[string]any{"name": repo(newName)}, nil); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moved == nil {
		s.moved = map[string]string{}
	}
	s.moved[from] = repo(newName)
	return nil
}

// Commit is a commit as Gitea's API shows it.
type Commit struct {
	SHA    string `json:"sha"`
	Commit struct {
		Message string `json:"message"`
		Author  struct {
			Name  string `json:"name"`
			Email string `json:"email"`
		} `json:"author"`
	} `json:"commit"`
}

// GetCommit reads a commit through GET /repos/{owner}/{repo}/git/commits/{sha}.
func (s *Server) GetCommit(name, sha string) (Commit, error) {
	var c Commit
	err := s.API(http.MethodGet, "/repos/"+Owner+"/"+s.current(name)+"/git/commits/"+sha, "", nil, &c)
	return c, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// SSHURL is the ssh:// URL of repository name on Gitea's built-in SSH
// server.
func (s *Server) SSHURL(name string) string {
	return fmt.Sprintf("ssh://git@127.0.0.1:%d/%s/%s.git", s.SSHPort, Owner, s.current(name))
}

// AddDeployKey adds an SSH public key (an authorized_keys line) to
// repository name, with write access unless readOnly.
func (s *Server) AddDeployKey(name, title, key string, readOnly bool) error {
	return s.API(http.MethodPost, "/repos/"+Owner+"/"+s.current(name)+"/keys", "", map[string]any{
		"title": title, "key": strings.TrimSpace(key), "read_only": readOnly,
	}, nil)
}

// KnownHosts is what ssh-keyscan reads of Gitea's SSH server: the lines of
// a known_hosts file that pin its host keys.
func (s *Server) KnownHosts() (string, error) {
	var last error
	for range 50 {
		out, err := exec.Command("ssh-keyscan", "-p", fmt.Sprint(s.SSHPort), "127.0.0.1").Output()
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			return string(out), nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("ssh-keyscan of Gitea's SSH server: %v", last)
}

// DirectURL is the clone URL of repository name on Gitea itself, without
// the proxy (for measurements).
func (s *Server) DirectURL(name string) string {
	return "http://" + s.gitea + "/" + Owner + "/" + s.current(name) + ".git"
}

// CredentialURL is DirectURL with the owner's token in it, for the git
// command line of a benchmark; never for the worker.
func (s *Server) CredentialURL(name string) string {
	return "http://" + Owner + ":" + s.Token + "@" + s.gitea + "/" + Owner + "/" + s.current(name) + ".git"
}
