// Package loopback has what the test servers share: a free port on
// 127.0.0.1, stopping a server process by its PID, and finding what a make
// target built into .tools.
package loopback

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on, for
// servers that must be told their port before they start. Between the
// call and the server's bind the port is free, so it is taken from below
// the kernel's ephemeral range (where a listener on port 0 never lands),
// and no two calls of one process return the same port: tests side by side
// cannot take each other's. Another process's call can, rarely; it starts
// at a random point of the range.
func FreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.lo, ports.hi = belowEphemeral()
		ports.given = map[int]bool{}
		if ports.hi > ports.lo {
			ports.next = ports.lo + rand.IntN(ports.hi-ports.lo)
		}
	}
	for range ports.hi - ports.lo {
		p := ports.next
		if ports.next++; ports.next >= ports.hi {
			ports.next = ports.lo
		}
		if ports.given[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		ports.given[p] = true
		return p, nil
	}
	// No range below the ephemeral one: a port the kernel has free, not
	// one handed out before.
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !ports.given[p] {
			ports.given[p] = true
			return p, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 that was not handed out before")
}

// ports is what FreePort has handed out, and where it looks next.
var ports struct {
	sync.Mutex
	lo, hi, next int
	given        map[int]bool
}

// belowEphemeral is the range FreePort takes ports from: up to 10,000
// ports under the kernel's ephemeral range, above the privileged ones.
func belowEphemeral() (lo, hi int) {
	hi = 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return max(1024, hi-10000), hi
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
