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
	"crypto/tls"
	"fmt"
	"net/http"
	"syscall"
	"time"
)

// component returns the running process of a control-plane component.
func (c *Cluster) component(name string) (int, *Process, error) {
	for i, p := range c.procs {
		if p.Name == name {
			return i, p, nil
		}
	}
	return 0, nil, fmt.Errorf("no %s in this cluster", name)
}

// Pid returns the process id of a running control-plane component
// ("etcd", "kube-apiserver"), for tools that measure it.
func (c *Cluster) Pid(name string) (int, error) {
	_, p, err := c.component(name)
	if err != nil {
		return 0, err
	}
	return p.Pid(), nil
}

// KillAndRestart kills a component with SIGKILL, leaves it down for down,
// and starts it again with the same command line (its log continues in a
// second file). For kube-apiserver it returns once /readyz answers.
func (c *Cluster) KillAndRestart(ctx context.Context, name string, down time.Duration) error {
	if err := c.Kill(name); err != nil {
		return err
	}
	time.Sleep(down)
	return c.Restart(ctx, name)
}

// Kill SIGKILLs a component and returns once it is gone. Restart brings it
// back; in between, a test can start something that must cope without it.
func (c *Cluster) Kill(name string) error {
	_, p, err := c.component(name)
	if err != nil {
		return err
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Exited()
	return nil
}

// Restart starts a component that Kill stopped, with the same command line
// (its log continues in a second file). For kube-apiserver it returns once
// /readyz answers.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	i, old, err := c.component(name)
	if err != nil {
		return err
	}
	p, err := StartProcess(name, old.cmd.Path, old.LogPath+".restarted", nil, old.cmd.Args[1:]...)
	if err != nil {
		return err
	}
	c.procs[i] = p
	if name != "kube-apiserver" {
		return nil
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return p.WaitReady(ctx, 2*time.Minute, httpCheck(insecure, c.Server+"/readyz", c.Config.BearerToken))
}

// Pause freezes a component with SIGSTOP for d, then lets it go on with
// SIGCONT: to everything else it is gone (connections hang, then time
// out), and it comes back with its data as it was, as a stalled etcd does.
func (c *Cluster) Pause(name string, d time.Duration) error {
	_, p, err := c.component(name)
	if err != nil {
		return err
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return p.Signal(syscall.SIGCONT)
}
