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

package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane binary running in the background, with its
// output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when the process is gone
	err     error         // why it exited; valid after exited is closed
}

func startProcess(name, binary, logDir string, args ...string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so Ctrl-C in a terminal reaches only us
		// and we stop the components in order.
		Setpgid: true,
		// If this program dies without cleaning up, the kernel kills the
		// component, so nothing is left holding ports or data.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop asks the process to exit, and kills it if it has not after grace.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitReady polls check until it succeeds, the process exits, or the time
// is up. Failures carry the end of the process's log, which is almost
// always where the reason is.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up (%v)%s", p.name, p.err, p.logTail())
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("start-up of %s interrupted: %w", p.name, ctx.Err())
			}
			return fmt.Errorf("%s not ready after %s: %v%s", p.name, timeout, last, p.logTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of the log, formatted to append to an error.
func (p *process) logTail() string {
	const lines = 25
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(data, nil)), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprintf("\n--- last lines of %s ---\n%s", p.logPath, strings.Join(all, "\n"))
}

// freePorts reserves n distinct free TCP ports on 127.0.0.1. The ports are
// released before return, so another program could take one in between;
// start-up then fails with "address already in use" in the component's log
// and Start reports it.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

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
