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
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// controllerRun is bar-controller running as a separate process, as it
// would in a real deployment, not inside this program. It can be stopped
// and started again; each run logs to a file of its own.
type controllerRun struct {
	binary, logDir, readyz string
	args                   []string

	proc *localcluster.Process // nil while stopped
	runs int
}

func (c *controllerRun) start(ctx context.Context) error {
	c.runs++
	name := "bar-controller.log"
	if c.runs > 1 {
		name = fmt.Sprintf("bar-controller.%d.log", c.runs)
	}
	p, err := localcluster.StartProcess("bar-controller", c.binary, filepath.Join(c.logDir, name), nil, c.args...)
	if err != nil {
		return err
	}
	c.proc = p
	fmt.Printf("==> Started %s (pid %d), out of cluster; its log: %s\n", c.binary, p.Pid(), p.LogPath)
	return waitControllerReady(ctx, p, c.readyz)
}

// stop sends SIGTERM, which lets syncs in progress finish (each gets up
// to 30 s), and waits for the process to exit.
func (c *controllerRun) stop() {
	if c.proc == nil {
		return
	}
	c.proc.Stop(40 * time.Second)
	c.proc = nil
	fmt.Println("==> Stopped bar-controller")
}

// exited is closed when the running controller exits; nil (never ready)
// while it is stopped on purpose.
func (c *controllerRun) exited() <-chan struct{} {
	if c.proc == nil {
		return nil
	}
	return c.proc.Exited()
}

func (c *controllerRun) logPath() string {
	if c.proc == nil {
		return ""
	}
	return c.proc.LogPath
}

func (c *controllerRun) tail() string {
	if c.proc == nil {
		return ""
	}
	return c.proc.LogTail(25)
}

// readEnters delivers one value per line read from standard input; with no
// terminal there (stdin at EOF), it never delivers.
func readEnters() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- struct{}{}
		}
	}()
	return ch
}

// waitControllerReady waits for url to answer 200, so that a controller
// that cannot start says so here rather than as a Bar that never converges.
func waitControllerReady(ctx context.Context, p *localcluster.Process, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return p.WaitReady(ctx, time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}
