/*
Copyright The bar-controller Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a program running in the background with its output in a log
// file: a control-plane component, or bar-controller itself in make run and
// the tests that exercise the real binary.
type Process struct {
	Name    string
	LogPath string

	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process is gone
	state    *os.ProcessState
	exitedAt time.Time
}

// StartProcess runs binary with args, its output going to logPath, and env
// added to this process's environment.
func StartProcess(name, binary, logPath string, env []string, args ...string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so Ctrl-C in a terminal reaches only the
		// program that started it, which then stops things in order.
		Setpgid: true,
		// If that program dies without cleaning up, the kernel kills this
		// one, so nothing is left holding ports or data.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state, p.exitedAt = cmd.ProcessState, time.Now()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// State says how the process ended; valid once Exited is closed.
func (p *Process) State() *os.ProcessState { return p.state }

// ExitedAt is when the exit was noticed; valid once Exited is closed.
func (p *Process) ExitedAt() time.Time { return p.exitedAt }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop asks the process to exit (SIGTERM) and kills it if it has not after
// grace. It reports whether the process was still running.
func (p *Process) Stop(grace time.Duration) bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return true
}

// WaitReady polls check until it succeeds, the process exits, or the time
// is up. Failures carry the process's log, which is almost always where
// the reason is.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up (%v)%s", p.Name, p.state, p.LogTail(25))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("start-up of %s interrupted: %w", p.Name, ctx.Err())
			}
			return fmt.Errorf("%s not ready after %s: %v%s", p.Name, timeout, last, p.LogTail(25))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogTail returns the last n lines of the log, formatted to append to an
// error. The first lines come too when the log is longer: a bad flag is
// reported at the top of the usage text that follows it.
func (p *Process) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(data, nil)), "\n"), "\n")
	if len(lines) > n+3 {
		lines = slices.Concat(lines[:3], []string{"[...]"}, lines[len(lines)-n:])
	}
	return fmt.Sprintf("\n--- %s ---\n%s", p.LogPath, strings.Join(lines, "\n"))
}

// FreeAddrs returns n distinct 127.0.0.1:port addresses that were free a
// moment ago. They are released before return, so another program could
// take one in between; whatever then binds it fails to start, and its log
// (see WaitReady) says "address already in use".
//
// Within this process no port is handed out twice: the kernel may give a
// port just released to the next request for any free one, and a test
// that asks twice for one process's addresses (a webhook's, then the
// metrics' and probes') once got the same port for two of its listeners.
func FreeAddrs(n int) ([]string, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	var addrs []string
	// A port handed out before stays held until the end, so the kernel
	// gives another; bounded, in case the ephemeral range runs dry.
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("finding %d free ports on 127.0.0.1 not handed out before: only %d after %d tries", n, len(addrs), tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
		}
		defer l.Close() // held until all are picked, so they differ
		addr := l.Addr().String()
		if handedOut.ports[addr] {
			continue
		}
		handedOut.ports[addr] = true
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

var handedOut = struct {
	mu    sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// findBinary returns dir/name if it is an executable file.
func findBinary(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s not found in %s: build the binaries with hack/install-k8s-binaries.sh (make k8s-binaries)", name, dir)
	}
	if err != nil {
		return "", err
	}
	if info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable", path)
	}
	return path, nil
}
