package progress

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tenant-worker/tenant-worker/internal/printable"
	"github.com/tenant-worker/tenant-worker/internal/redact"
)

// openPTY opens a pseudo-terminal pair: the controlling side and the
// terminal a command would write to.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	ptm = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { pts.Close(); ptm.Close() })
	return ptm, pts
}

func TestShowsOnATerminal(t *testing.T) {
	ptm, pts := openPTY(t)
	l := New(pts)
	if !l.Enabled() {
		t.Fatal("no progress on a terminal")
	}
	l.Show("cloning %s", "repo")
	l.Clear()
	buf := make([]byte, 256)
	n, err := ptm.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); !strings.Contains(got, "cloning repo (0s)") || !strings.Contains(got, "\r\033[K") {
		t.Errorf("terminal got %q", got)
	}
}

// TestShowsThroughTheCLIsWriters: the CLI's output is wrapped (redact,
// printable); the line still shows on the terminal underneath, with its
// own escapes, and text from elsewhere in it is blanked and made inert.
func TestShowsThroughTheCLIsWriters(t *testing.T) {
	ptm, pts := openPTY(t)
	redact.Add("progress-secret")
	l := New(printable.Writer(redact.Writer(pts)))
	if !l.Enabled() {
		t.Fatal("no progress on a terminal behind the CLI's writers")
	}
	l.Show("cloning %s", "http://u:progress-secret@h/\x1b]0;x\x07")
	buf := make([]byte, 256)
	n, err := ptm.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(buf[:n])
	if !strings.HasPrefix(got, "\r\033[K") || strings.Contains(got, "progress-secret") || strings.Contains(got, "\x1b]0") {
		t.Errorf("terminal got %q", got)
	}
}

func TestQuietWhenPiped(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l := New(w)
	l.Show("cloning")
	l.Clear()
	w.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	if l.Enabled() || out.Len() != 0 {
		t.Errorf("wrote %q to a pipe", out.String())
	}
	// Not a file at all: nothing either.
	var b bytes.Buffer
	New(&b).Show("x")
	if b.Len() != 0 {
		t.Errorf("wrote %q to a buffer", b.String())
	}
}
