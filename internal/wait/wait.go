// Package wait holds the one way the worker pauses: for a duration, or
// until its context ends, whichever comes first.
package wait

import (
	"context"
	"time"
)

// Sleep waits for d, or returns the cause of ctx's end as soon as it ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
