package loopback

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// TestFreePortsAreNeverTwiceAndNeverEphemeral: tests side by side pick
// ports and bind them later; none may get a port another test picked, nor
// one a listener on port 0 can get in the meantime.
func TestFreePortsAreNeverTwiceAndNeverEphemeral(t *testing.T) {
	_, ephemeral := belowEphemeral()
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				p, err := FreePort()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[p] {
					t.Errorf("port %d handed out twice", p)
				}
				seen[p] = true
				mu.Unlock()
				if p >= ephemeral {
					t.Errorf("port %d is in the ephemeral range (from %d)", p, ephemeral)
				}
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
				if err != nil {
					t.Errorf("port %d: %v", p, err)
					return
				}
				ln.Close()
			}
		})
	}
	wg.Wait()
	// And the kernel's own choice is above them.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if p := ln.Addr().(*net.TCPAddr).Port; seen[p] {
		t.Errorf("a listener on port 0 got %d, which FreePort handed out", p)
	}
}

// TestFreePortSkipsAPortInUse: a port something listens on is not handed out.
func TestFreePortSkipsAPortInUse(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Hold the next port FreePort would try.
	ports.Lock()
	next := ports.next
	ports.Unlock()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", next))
	if err != nil {
		t.Skipf("port %d already taken by something else: %v", next, err)
	}
	defer ln.Close()
	q, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if q == next || q == p {
		t.Errorf("FreePort returned %d (held: %d, earlier: %d)", q, next, p)
	}
}
