// Package progress shows what a long command is doing on a terminal, on one
// line that rewrites itself, and stays silent when its output is piped or
// redirected.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/tenant-worker/tenant-worker/internal/printable"
	"github.com/tenant-worker/tenant-worker/internal/redact"
)

// Line is a status line on a terminal, or nothing.
type Line struct {
	mu    sync.Mutex
	w     io.Writer
	on    bool
	start time.Time
	shown bool
}

// New shows progress on w when w is a terminal. When w wraps another writer
// (the CLI's redacting, printable output), the line is written to the writer
// underneath, its own control sequences intact, and its text is blanked of
// secrets and made printable here.
func New(w io.Writer) *Line {
	for {
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	on := false
	if f, ok := w.(*os.File); ok {
		on = term.IsTerminal(int(f.Fd()))
	}
	return &Line{w: w, on: on, start: time.Now()}
}

// Enabled reports whether anything is shown.
func (l *Line) Enabled() bool { return l.on }

// Show replaces the line with the formatted text and the time elapsed.
func (l *Line) Show(format string, args ...any) {
	if !l.on {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	text := printable.String(redact.String(fmt.Sprintf(format, args...)))
	fmt.Fprintf(l.w, "\r\033[K%s (%s)", text, time.Since(l.start).Round(time.Second))
	l.shown = true
}

// Clear removes the line, before the command prints its result.
func (l *Line) Clear() {
	if !l.on {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown {
		fmt.Fprint(l.w, "\r\033[K")
		l.shown = false
	}
}
