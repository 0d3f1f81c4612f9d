// Package gitserver runs git's own smart-HTTP server (git http-backend behind
// net/http/cgi) on loopback, with token authentication the way Gitea checks
// it: any username, the token as the password. Tests and `make run` use it as
// the real remote; Hook lets fault tests interfere with requests.
package gitserver

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Hook sees every request before git does. It returns false when it has
// answered the request itself.
type Hook func(w http.ResponseWriter, r *http.Request) bool

// Hooks holds a test server's hook; both test git servers embed it.
type Hooks struct {
	mu   sync.Mutex
	hook Hook
}

// SetHook installs h (nil removes it).
func (k *Hooks) SetHook(h Hook) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hook = h
}

// Pass runs the hook on a request and reports whether the server should
// go on to answer it (false: the hook answered).
func (k *Hooks) Pass(w http.ResponseWriter, r *http.Request) bool {
	k.mu.Lock()
	hook := k.hook
	k.mu.Unlock()
	return hook == nil || hook(w, r)
}

// Server is a running git smart-HTTP server.
type Server struct {
	// URL is the base URL, such as http://127.0.0.1:41234.
	URL string
	// Root holds the bare repositories.
	Root  string
	token string

	backend string
	srv     *http.Server
	ln      net.Listener

	Hooks

	mu    sync.Mutex
	moved map[string]string // old repository name -> new, after Rename

	// inflight counts requests still being served (under mu), so Close can
	// wait for git to finish writing into Root before a test removes it.
	inflight int
}

// Start serves the bare repositories under root on addr (such as
// "127.0.0.1:0"). An empty token disables authentication.
func Start(root, addr, token string) (*Server, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("find git: %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("find git http-backend: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Root: root, token: token, backend: backend, ln: ln}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// closeWait bounds how long Close waits for requests in flight.
const closeWait = 30 * time.Second

// Close stops the server and waits (up to 30s) for the requests in flight,
// so that no git process still writes into Root once it returns.
func (s *Server) Close() error {
	err := s.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	deadline := time.Now().Add(closeWait)
	for s.running() > 0 {
		if time.Now().After(deadline) {
			return errors.Join(err, fmt.Errorf("git server: requests still running after %s", closeWait))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// running is the number of requests in flight.
func (s *Server) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

// track counts a request in flight until the returned func is called.
func (s *Server) track() func() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}
}

// Rename moves repository name to newName, and from then on answers
// requests for the old name with 301 to the new one, on info/refs and on
// POSTs alike, as Gitea does after a rename. The server's own helpers
// (Output, WriteFile, RepoPath) follow the move.
func (s *Server) Rename(name, newName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := s.currentLocked(name)
	if err := os.Rename(filepath.Join(s.Root, from), filepath.Join(s.Root, newName)); err != nil {
		return err
	}
	if s.moved == nil {
		s.moved = map[string]string{}
	}
	s.moved[from] = newName
	return nil
}

// currentLocked follows renames from name (under mu).
func (s *Server) currentLocked(name string) string {
	for i := 0; i < 100; i++ {
		next, ok := s.moved[name]
		if !ok {
			break
		}
		name = next
	}
	return name
}

// SetToken changes the token the server accepts (a rotation).
func (s *Server) SetToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// ServeHTTP checks the token, runs the hook and hands the request to git.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.track()()
	s.mu.Lock()
	token := s.token
	var redirect string
	for old, name := range s.moved {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/"+old+"/"); ok {
			redirect = "/" + name + "/" + rest
		}
	}
	s.mu.Unlock()
	if redirect != "" {
		if r.URL.RawQuery != "" {
			redirect += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, redirect, http.StatusMovedPermanently)
		return
	}
	if token != "" {
		_, pass, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(pass), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	if !s.Pass(w, r) {
		return
	}
	s.Backend(w, r)
}

// Backend hands a request to git http-backend as the authenticated user,
// bypassing the hook: a hook calls it to act after git has answered (for
// example, once the branch was updated but before the client hears so).
func (s *Server) Backend(w http.ResponseWriter, r *http.Request) {
	user, _, ok := r.BasicAuth()
	if !ok || user == "" {
		user = "anonymous"
	}
	h := &cgi.Handler{
		Path: s.backend,
		Root: "/",
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=" + user, // without it git refuses pushes
		},
	}
	h.ServeHTTP(w, r)
}

// RepoURL is the clone URL of the repository name.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name }

// RepoPath is the bare repository's directory (where it is now, after any
// rename).
func (s *Server) RepoPath(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filepath.Join(s.Root, s.currentLocked(name))
}

// CreateRepo makes a bare repository name whose branch holds one commit with
// the files of seed, and returns its URL.
func (s *Server) CreateRepo(name, branch string, seed fs.FS) (string, error) {
	bare := s.RepoPath(name)
	if err := git("", "init", "-q", "--bare", "-b", branch, bare); err != nil {
		return "", err
	}
	if err := Seed(seed, branch, bare); err != nil {
		return "", err
	}
	return s.RepoURL(name), nil
}

// Seed pushes the files of seed as one commit to branch of remote; config
// (such as "http.extraHeader=...") is given to the push as -c options.
func Seed(seed fs.FS, branch, remote string, config ...string) error {
	work, err := os.MkdirTemp("", "gitserver-seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, seed); err != nil {
		return fmt.Errorf("copy seed: %w", err)
	}
	var push []string
	for _, c := range config {
		push = append(push, "-c", c)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", branch},
		{"add", "-A"},
		{"commit", "-q", "-m", "Initial GitOps tree"},
		append(push, "push", "-q", remote, branch),
	} {
		if err := git(work, args...); err != nil {
			return err
		}
	}
	return nil
}

// git runs the git command line with a fixed identity.
// identity is who the commits git makes here are by.
var identity = []string{"GIT_AUTHOR_NAME=seed", "GIT_AUTHOR_EMAIL=seed@example.com",
	"GIT_COMMITTER_NAME=seed", "GIT_COMMITTER_EMAIL=seed@example.com"}

func git(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), identity...), "GIT_CONFIG_NOSYSTEM=1", "HOME="+os.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Git runs a git command in dir, for tests that act as another writer.
func Git(dir string, args ...string) error { return git(dir, args...) }

// Output runs a git command against the bare repository name and returns
// its output, for tests that read what the worker pushed.
func (s *Server) Output(name string, args ...string) (string, error) {
	return OutputIn(s.RepoPath(name), args...)
}

// OutputIn runs a git command against the bare repository at gitDir (one
// that writes a commit, such as commit-tree, writes it as the seed's).
func OutputIn(gitDir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"--git-dir", gitDir}, args...)...)
	cmd.Env = append(os.Environ(), identity...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// WriteFile commits content at path on branch of repository name directly
// in the bare repository, as another writer (a person, or Flux image
// automation) would; see CommitFile.
func (s *Server) WriteFile(name, branch, path, content, msg string) error {
	return CommitFile(s.RepoPath(name), branch, path, content, msg)
}

// CommitFile commits content at path on branch of the bare repository at
// gitDir. It builds the commit with git's plumbing (no clone) and moves the
// branch with a compare-and-swap, trying again when another writer moved
// it in between.
func CommitFile(gitDir, branch, path, content, msg string) error {
	index, err := os.CreateTemp("", "gitserver-index-")
	if err != nil {
		return err
	}
	index.Close()
	defer os.Remove(index.Name())
	ref := "refs/heads/" + branch
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"--git-dir", gitDir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index.Name(),
			"GIT_AUTHOR_NAME=writer", "GIT_AUTHOR_EMAIL=writer@example.com",
			"GIT_COMMITTER_NAME=writer", "GIT_COMMITTER_EMAIL=writer@example.com")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr)
		}
		return strings.TrimSpace(string(out)), nil
	}
	blob, err := run(content, "hash-object", "-w", "--stdin")
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		head, err := run("", "rev-parse", "--verify", ref)
		if err != nil {
			return err
		}
		if _, err := run("", "read-tree", head); err != nil {
			return err
		}
		if _, err := run("", "update-index", "--add", "--cacheinfo", "100644,"+blob+","+path); err != nil {
			return err
		}
		tree, err := run("", "write-tree")
		if err != nil {
			return err
		}
		commit, err := run(msg, "commit-tree", tree, "-p", head)
		if err != nil {
			return err
		}
		if _, err = run("", "update-ref", ref, commit, head); err == nil || attempt == 20 {
			return err
		}
	}
}
