// Package loopback has what the test servers share: a free port on
// 127.0.0.1, and stopping a server process by its PID.
package loopback

import (
	"net"
	"os/exec"
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
