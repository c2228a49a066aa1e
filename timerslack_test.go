package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The hub executes itself again, once, with the timer slack set, and every thread of the new image
// has it: sysmon's, made before main runs, as the ones made later.
func TestTimerSlackExecutesOnceWithIt(t *testing.T) {
	if os.Getenv("NODEHUB_TEST_SLACK") != "" {
		fmt.Printf("start %d\n", os.Getpid())
		if err := slackTimers(2 * time.Millisecond); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		got := make(chan int)
		go func() {
			runtime.LockOSThread() // a thread of the new image's, kept to itself
			n, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
			got <- n
		}()
		fmt.Printf("slack %d\n", <-got)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTimerSlackExecutesOnceWithIt$")
	cmd.Env = append(os.Environ(), "NODEHUB_TEST_SLACK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	starts, slacks := 0, 0
	pids := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if pid, ok := strings.CutPrefix(line, "start "); ok {
			starts++
			pids[pid] = true
		}
		if line == "slack 2000000" {
			slacks++
		}
	}
	if starts != 2 || len(pids) != 1 || slacks != 1 {
		t.Fatalf("want two starts of one process and the slack once:\n%s", out)
	}
	if err := slackTimers(0); err != nil {
		t.Fatalf("--timer-slack=0: %v", err)
	}
}
