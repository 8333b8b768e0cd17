package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a consumer subprocess as the parent sees it: its report lines, whether it started working, and its exit.
type proc struct {
	name    string
	cmd     *exec.Cmd
	working chan struct{} // closed at the first "working" line
	exited  chan struct{} // closed when the process is gone and its stdout is drained
	err     error         // the exit status, valid once exited is closed

	mu    sync.Mutex
	lines []string
}

// spawn starts `bin consume` with cfg. Its stderr goes to a log file under logDir, kept for evidence; each stdout
// line is handed to onLine (which may be nil) from a goroutine of its own, in order.
func spawn(bin, logDir string, cfg consumerConfig, onLine func(p *proc, line string)) (*proc, error) {
	name := cfg.Name
	logf, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, cfg.args()...)
	cmd.Stderr = logf
	// A consumer must not outlive the harness: an orphan would keep consuming and writing into the next run's
	// measurements, or hold a database connection through a restart.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start consumer %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, working: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			if line == "working" {
				once.Do(func() { close(p.working) })
			}
			if onLine != nil {
				onLine(p, line)
			}
		}
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL, the hard kill: no deferred function, no close, no last offset commit. It returns once the
// process is gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop asks the consumer to close gracefully (SIGTERM: the router waits for its handlers and Sarama commits and
// leaves the group), and kills it if it has not exited within grace.
func (p *proc) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("consumer %s did not close within %s", p.name, grace)
	}
}

// count returns how many of the process's report lines start with prefix.
func (p *proc) count(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// find returns the report lines that start with prefix, without it.
func (p *proc) find(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}
