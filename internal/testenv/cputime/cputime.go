// Package cputime reads what Linux counts of a process's processor time, for
// the tests and the benchmarks that attribute it.
package cputime

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Times is a process's processor time: its own (user and system), and
// that of the children it has waited for.
type Times struct {
	Self, Children time.Duration
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// Of reads utime, stime, cutime and cstime (fields 14 to 17) of
// /proc/<pid>/stat.
func Of(pid int) (Times, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Times{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it are counted from its closing one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Times{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return Times{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks [4]int64
	for j, s := range f[11:15] { // fields 14 to 17: state is field 3, f[0]
		if ticks[j], err = strconv.ParseInt(s, 10, 64); err != nil {
			return Times{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	d := func(t int64) time.Duration { return time.Duration(t) * time.Second / clockTicks }
	return Times{Self: d(ticks[0] + ticks[1]), Children: d(ticks[2] + ticks[3])}, nil
}

// WaitedChildren is the user and system time of this process's children
// that it has waited for.
func WaitedChildren() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
