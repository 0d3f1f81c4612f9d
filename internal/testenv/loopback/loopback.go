// Package loopback has what the test servers share: a free port on
// 127.0.0.1, stopping a server process by its PID, and finding what a make
// target built into .tools.
package loopback

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago, for servers that must be told their port before they start.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Stop sends cmd's process SIGTERM and waits for done (closed or sent to
// when the process was reaped), and SIGKILLs it after grace.
func Stop(cmd *exec.Cmd, done <-chan error, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Tool finds what a make target built into .tools at the root of this
// module: the file rel under .tools, looked for from the working folder
// up to the folder of go.mod. target names the make target for the error.
func Tool(rel, target string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, ".tools", rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return "", fmt.Errorf("nothing at %s: run `make %s` (make test does)", p, target)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no .tools/" + rel + ": run `make " + target + "` (make test does)")
		}
		dir = parent
	}
}
