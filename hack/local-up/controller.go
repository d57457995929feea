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

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// controllerProc is bar-controller running as a separate process, as it
// would in a real deployment, not in this program.
type controllerProc struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // valid once exited is closed
}

func startController(binary, logPath string, args ...string) (*controllerProc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Like the components: its own process group, so Ctrl-C reaches only
	// this program, which stops the controller before the API server; and
	// killed by the kernel if this program dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting bar-controller: %w", err)
	}
	p := &controllerProc{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop lets the controller finish its syncs in progress (SIGTERM), and
// kills it if that takes over ten seconds. It is safe to call twice.
func (p *controllerProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitReady waits for url to answer 200, so that a controller that cannot
// start says so here rather than as a Bar that never converges.
func (p *controllerProc) waitReady(ctx context.Context, url string) error {
	deadline := time.After(time.Minute)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("bar-controller exited during start-up (%v)%s", p.err, tail(p.logPath))
		case <-deadline:
			return fmt.Errorf("bar-controller not ready (GET %s) after a minute%s", url, tail(p.logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freePorts returns two free loopback addresses. They are released before
// return, so another program could take one in between: bar-controller
// then exits with "address already in use", which waitReady reports.
func freePorts() (string, string, error) {
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
		}
		defer l.Close() // held until both are picked, so they differ
		addrs = append(addrs, l.Addr().String())
	}
	return addrs[0], addrs[1], nil
}

// tail returns the end of a log, formatted to append to an error, and its
// first lines too: a bad flag is reported at the top of the usage text.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = slices.Concat(lines[:3], []string{"[...]"}, lines[len(lines)-25:])
	}
	return fmt.Sprintf("\n--- %s ---\n%s", path, strings.Join(lines, "\n"))
}
