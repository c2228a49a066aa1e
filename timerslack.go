package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Timer slack is how late the kernel may wake a thread that sleeps with a timeout, so it wakes it
// together with others. While the hub runs, the Go runtime's monitor thread (sysmon) sleeps 20 µs
// at a time, and with the default slack (50 µs) each of those sleeps is a wake-up of its own: on
// the node profile's churn (10 slice events a second) sysmon was a quarter of the hub's CPU and
// most of its context switches. With a millisecond of slack it sleeps ~1 ms at a time, which is
// all its work needs (it retakes a core from a blocked system call, preempts a goroutine that ran
// 10 ms); the hub's own timers (bookmarks, deadlines, the cache's sync) are seconds long and may
// come a millisecond late. A thread takes its slack from the thread that made it, and sysmon is
// made before main runs: so the hub sets it and executes itself again, once, at start (the same
// process, arguments and environment), and every thread of the new image inherits it.

// defaultTimerSlack is --timer-slack's default, maxTimerSlack its bound (the kernel would take
// any: a second of slack would make every deadline of the hub a second late).
const (
	defaultTimerSlack = time.Millisecond
	maxTimerSlack     = 100 * time.Millisecond
)

// slackTimers gives every thread of the hub a timer slack of d (none when d is not positive): when
// the calling thread's is less, it sets it and executes the binary again. It returns only when
// there is nothing to do or that failed.
func slackTimers(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	runtime.LockOSThread() // the slack is the thread's: set it on the thread that executes
	defer runtime.UnlockOSThread()
	if cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err != nil || time.Duration(cur) >= d {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(d), 0, 0, 0); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	// Never executed again without the slack in place (the new image would do the same, forever).
	if cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err != nil || time.Duration(cur) < d {
		return fmt.Errorf("timer slack: %v not set (%d ns)", d, cur)
	}
	return syscall.Exec("/proc/self/exe", os.Args, os.Environ())
}
