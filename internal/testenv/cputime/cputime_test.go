package cputime

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestOf reads this process's processor time and sees it grow while the
// process works; a process that does not exist is an error.
func TestOf(t *testing.T) {
	first, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	x := 0
	for {
		for i := range 10_000_000 {
			x ^= i
		}
		now, err := Of(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now.Self-first.Self >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processor time went from %s to %s in 30s of work (%d)", first.Self, now.Self, x)
		}
	}
	if _, err := Of(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// TestChildren: a child's work counts once it is waited for, in this
// process's own /proc entry and in its resource usage.
func TestChildren(t *testing.T) {
	before, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	waited := WaitedChildren()
	for deadline := time.Now().Add(time.Minute); ; {
		if err := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done").Run(); err != nil {
			t.Fatal(err)
		}
		now, err := Of(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now.Children > before.Children && WaitedChildren() > waited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute of children's work did not count: %s to %s, rusage %s to %s",
				before.Children, now.Children, waited, WaitedChildren())
		}
	}
}
