package controlplane

import (
	"os"
	"testing"
	"time"
)

// TestProcCPU reads this process's processor time and sees it grow while
// the process works.
func TestProcCPU(t *testing.T) {
	first, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	x := 0
	for {
		for i := range 10_000_000 {
			x ^= i
		}
		now, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-first >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processor time went from %s to %s in 30s of work (%d)", first, now, x)
		}
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
