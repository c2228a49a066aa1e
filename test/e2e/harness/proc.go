package harness

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process whose output goes to a log file. It dies with the test process.
type Proc struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	LogFile string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts the process (again, after Stop).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if p.Env != nil {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process has been started and not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s not started", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits up to d for the process to exit and returns its exit error.
func (p *Proc) Wait(d time.Duration) (error, bool) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil, true
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err, true
	case <-time.After(d):
		return nil, false
	}
}

// Stop sends SIGTERM, then SIGKILL after 10s, and waits for the exit.
func (p *Proc) Stop() {
	if !p.Running() {
		return
	}
	_ = p.Signal(syscall.SIGCONT) // a paused process cannot handle SIGTERM
	_ = p.Signal(syscall.SIGTERM)
	if _, ok := p.Wait(10 * time.Second); !ok {
		_ = p.Signal(syscall.SIGKILL)
		p.Wait(5 * time.Second)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	if !p.Running() {
		return
	}
	_ = p.Signal(syscall.SIGKILL)
	p.Wait(5 * time.Second)
}

// Log returns the process's log so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogFile)
	return string(b)
}

// Pid returns the process id (0 before Start).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
