package integration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
)

// TestFluxKeepsToItsOwnTempDir: kustomize-controller removes, when it
// starts, every kustomization-* folder of its temporary folder, as left
// over by a crash. Control planes started side by side (the integration
// tests) each have one of their own: starting one removes its own
// leftovers, never a folder another one's kustomize-controller is
// building from in the shared /tmp (which failed a parallel test with
// "kustomize build failed: must build at directory").
func TestFluxKeepsToItsOwnTempDir(t *testing.T) {
	t.Parallel()
	// Where another control plane's kustomize-controller would build, if
	// they shared /tmp.
	other, err := os.MkdirTemp("", "kustomization-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(other) })
	// What a crashed kustomize-controller of this control plane left.
	dir := t.TempDir()
	left := filepath.Join(controlplane.TempDir(dir), "kustomization-left")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, dir, controlplane.Options{Flux: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)

	// The purge ran: this control plane's leftover is gone, and nothing
	// outside its temporary folder went with it.
	for {
		if _, err := os.Stat(other); err != nil {
			t.Fatalf("kustomize-controller removed %s, outside its own temporary folder: %v\n%s",
				other, err, cp.Logs("kustomize-controller", 3000))
		}
		if _, err := os.Stat(left); errors.Is(err, fs.ErrNotExist) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kustomize-controller did not remove %s, the leftover in its own temporary folder:\n%s",
				left, cp.Logs("kustomize-controller", 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("kustomize-controller removed %s, outside its own temporary folder: %v\n%s",
			other, err, cp.Logs("kustomize-controller", 3000))
	}
}
