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
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// monitor samples the control plane while a row runs, so that when the
// API server stops answering (as it did at 50,000 Bars) the row leaves
// evidence of what it was doing: every 2 s, the step the bench is in,
// how long /readyz took to answer, kube-apiserver's and etcd's resident
// memory and CPU, and etcd's database size (what it has allocated, and
// what of that is in use). One tab-separated line per sample.
type monitor struct {
	phase atomic.Value // string
	stop  context.CancelFunc
	done  chan struct{}
}

func startMonitor(c *localcluster.Cluster, path string) (*monitor, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &monitor{stop: cancel, done: make(chan struct{})}
	m.phase.Store("start")
	fmt.Fprintln(f, "seconds\tstep\treadyz\tapiserver RSS MB\tapiserver CPU s\tetcd RSS MB\tetcd CPU s\tetcd db MB\tetcd db in use MB")
	client := loopbackClient()
	client.Timeout = 10 * time.Second
	go func() {
		defer close(m.done)
		defer f.Close()
		start := time.Now()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			fields := []string{fmt.Sprintf("%.0f", time.Since(start).Seconds()), m.phase.Load().(string), readyzLatency(client, c)}
			for _, name := range []string{"kube-apiserver", "etcd"} {
				fields = append(fields, processSample(c, name)...)
			}
			fields = append(fields, etcdSize(client, c)...)
			fmt.Fprintln(f, strings.Join(fields, "\t"))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return m, nil
}

func (m *monitor) step(s string) { m.phase.Store(s) }

func (m *monitor) close() {
	m.stop()
	<-m.done
}

func readyzLatency(client *http.Client, c *localcluster.Cluster) string {
	req, err := http.NewRequest(http.MethodGet, c.Server+"/readyz", nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+c.Config.BearerToken)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return "error after " + time.Since(start).Round(time.Millisecond).String()
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return fmt.Sprintf("%d in %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
}

// processSample is a process's resident memory now (VmRSS) and its CPU
// time so far.
func processSample(c *localcluster.Cluster, name string) []string {
	pid, err := c.Pid(name)
	if err != nil {
		return []string{"?", "?"}
	}
	rss, err := memoryField(pid, "VmRSS")
	if err != nil {
		return []string{"?", "?"}
	}
	_, cpu, err := usage(pid)
	if err != nil {
		return []string{fmt.Sprintf("%.0f", mb(rss)), "?"}
	}
	return []string{fmt.Sprintf("%.0f", mb(rss)), fmt.Sprintf("%.1f", cpu.Seconds())}
}

// etcdSize reads etcd's own gauges from its client URL (plain HTTP, no
// authentication in the test cluster).
func etcdSize(client *http.Client, c *localcluster.Cluster) []string {
	m, err := localcluster.Scrape(client, c.EtcdURL+"/metrics", "")
	if err != nil {
		return []string{"?", "?"}
	}
	var out []string
	for _, name := range []string{"etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes"} {
		v, ok := m.Value(name, nil)
		if !ok {
			out = append(out, "?")
			continue
		}
		out = append(out, fmt.Sprintf("%.0f", v/(1<<20)))
	}
	return out
}

// keepLogs copies the control plane's logs into dir before the row's
// temporary directory goes.
func keepLogs(c *localcluster.Cluster, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range c.Processes() {
		b, err := os.ReadFile(p[1])
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p[1])), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
