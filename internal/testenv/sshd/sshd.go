// Package sshd runs OpenSSH's sshd on loopback as a plain SSH git server for
// tests: its own host key, keys that may read and write through git-shell,
// and keys that may only fetch. make test installs Debian's openssh-server
// (without starting its service).
package sshd

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/testenv/loopback"
)

// Server is a running sshd.
type Server struct {
	// Addr is host:port; User is the account keys log in as (the user
	// running the tests).
	Addr, User string
	// HostKey is the server's public host key, as an authorized_keys line.
	HostKey string

	dir  string
	cmd  *exec.Cmd
	done chan error
	log  *bytes.Buffer
}

// Start runs sshd with its files under dir. writers may push and fetch;
// readers may only fetch. Keys are authorized_keys lines.
func Start(dir string, writers, readers []string) (*Server, error) {
	bin := "/usr/sbin/sshd"
	if _, err := os.Stat(bin); err != nil {
		return nil, errors.New("no /usr/sbin/sshd: make test installs Debian's openssh-server (make debs)")
	}
	git, err := exec.LookPath("git-shell")
	if err != nil {
		return nil, fmt.Errorf("no git-shell: %w", err)
	}
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	// sshd's privilege separation directory; the package makes it at boot.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, fmt.Errorf("create /run/sshd: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	hostKey := filepath.Join(dir, "host_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ssh-keygen: %w: %s", err, out)
	}
	pub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		return nil, err
	}
	readOnly := filepath.Join(dir, "read-only.sh")
	script := "#!/bin/sh\ncase \"$SSH_ORIGINAL_COMMAND\" in\n  git-upload-pack*) exec " + git + " -c \"$SSH_ORIGINAL_COMMAND\" ;;\n" +
		"  *) echo \"this key may only fetch\" >&2; exit 1 ;;\nesac\n"
	if err := os.WriteFile(readOnly, []byte(script), 0o755); err != nil {
		return nil, err
	}
	var keys strings.Builder
	for _, k := range writers {
		fmt.Fprintf(&keys, "command=\"%s -c \\\"$SSH_ORIGINAL_COMMAND\\\"\",restrict %s\n", git, strings.TrimSpace(k))
	}
	for _, k := range readers {
		fmt.Fprintf(&keys, "command=\"%s\",restrict %s\n", readOnly, strings.TrimSpace(k))
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, []byte(keys.String()), 0o600); err != nil {
		return nil, err
	}
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "sshd_config")
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowUsers %s
AllowTcpForwarding no
X11Forwarding no
PermitTTY no
`, port, hostKey, filepath.Join(dir, "sshd.pid"), authorized, u.Username)
	if err := os.WriteFile(config, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), User: u.Username, HostKey: strings.TrimSpace(string(pub)),
		dir: dir, log: &bytes.Buffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(bin, "-D", "-e", "-f", config)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sshd: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			return nil, fmt.Errorf("sshd exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, errors.New("sshd did not listen within 20s")
		}
	}
}

// Log is what sshd wrote so far (its -e log).
func (s *Server) Log() string { return s.log.String() }

// KnownHosts is the known_hosts line that pins this server's host key.
func (s *Server) KnownHosts() string {
	host, port, _ := net.SplitHostPort(s.Addr)
	return fmt.Sprintf("[%s]:%s %s\n", host, port, s.HostKey)
}

// URL is the ssh:// URL of the bare repository at path.
func (s *Server) URL(path string) string { return "ssh://" + s.User + "@" + s.Addr + path }

// Close stops sshd by its PID.
func (s *Server) Close() error {
	loopback.Stop(s.cmd, s.done, 10*time.Second)
	s.cmd = nil
	return nil
}
