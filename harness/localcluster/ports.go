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
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// portAttempts is how often a component that found its port taken is
// started again on another.
const portAttempts = 3

// startOnFreePort starts a component whose port only its health check
// uses, and waits until check(port) passes. FreeAddrs never hands out a
// port twice in this process, but it cannot know of another process (a
// make run, or a harness of another test package, beside this one) that
// takes the same free port between the pick and the component's bind;
// kube-controller-manager, started seconds after the ports are picked,
// lost its port so in CI. Such a start is retried on a new port.
func (c *Cluster) startOnFreePort(ctx context.Context, logDir, name string, port int, args func(port int) []string, check func(port int) func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		p, err := c.start(logDir, name, args(port)...)
		if err != nil {
			return err
		}
		err = p.WaitReady(ctx, time.Minute, check(port))
		if err == nil || attempt == portAttempts || !portTaken(p) {
			return err
		}
		// Keep the log of the attempt that lost its port.
		_ = os.Rename(p.LogPath, fmt.Sprintf("%s.port-taken-%d", p.LogPath, attempt))
		addrs, err := FreeAddrs(1)
		if err != nil {
			return err
		}
		_, s, _ := net.SplitHostPort(addrs[0])
		if port, err = strconv.Atoi(s); err != nil {
			return err
		}
	}
}

// portTaken says whether the process exited because its port was in use.
func portTaken(p *Process) bool {
	select {
	case <-p.Exited():
	default:
		return false
	}
	data, err := os.ReadFile(p.LogPath)
	return err == nil && strings.Contains(string(data), "bind: address already in use")
}
