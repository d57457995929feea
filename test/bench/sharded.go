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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	apisharding "k8s.io/apiserver/pkg/sharding"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/shards"
)

// The sharded bench (--shards): what one replica costs when R replicas
// share N shards of the Bars (docs/sharding.md), against one floor of the
// same run. Each configuration is a cold start of its own: R fresh
// replicas, their shards shared out, then n new Bars in a fresh namespace.
// The API server runs with ShardedListAndWatch on, so each replica
// receives only its shards' Bars.

// shardGate is the API server's feature gate for the shard selector.
const shardGate = "--feature-gates=ShardedListAndWatch=true"

// shardedRow is one configuration: Replicas replicas, each --shards=Shards.
type shardedRow struct {
	Replicas, Shards, N int
	// Settle is from the replicas' start until every shard was held, each
	// replica its fair share; Converge from the first Bar create until
	// every Bar was done, as a controller run's time in the main table.
	Settle, Converge time.Duration
	// Writes are the API server's counts per Bar over the run, until all
	// Events were written; ServerCPU is kube-apiserver's and etcd's CPU
	// over the same window as Converge.
	DeploymentWrites, StatusWrites, EventWrites, OtherWrites float64
	ServerCPU                                                time.Duration
	PerReplica                                               []replicaUsage
}

// replicaUsage is one replica's share and cost, read once it was idle.
type replicaUsage struct {
	// Shards held, Bars in their caches, and the Bars the API server sent
	// its shards' informers: kept in the shard, dropped outside it (0
	// with the gate on), from its own metrics. Unsharded, Bars is every
	// Bar and the others are 0.
	Shards, Bars, Kept, Dropped float64
	PeakRSS, Live               int64
	CPU                         time.Duration
	// Read is what the process read over its life (rchar of
	// /proc/<pid>/io): almost all of it the API server's answers on its
	// TLS connections, the watch streams above all.
	Read int64
}

type shardedResult struct {
	N                    int
	Floor, FloorCPU      time.Duration
	Rows                 []shardedRow
	FloorRetries, Shards int
	// MatchCost is what one shard selector's match of one Bar costs, the
	// test the watch cache makes for each sharded watcher and each event
	// (matchCost).
	MatchCost time.Duration
}

// sharded runs one floor and then one configuration per replica count.
func (s scenario) sharded(ctx context.Context, n, shards int, replicas []int) (res shardedResult, err error) {
	res.N, res.Shards = n, shards
	if res.MatchCost, err = matchCost(); err != nil {
		return res, err
	}
	row, err := s.newRow(ctx, fmt.Sprintf("sharded-%d", n), []string{shardGate})
	if err != nil {
		return res, err
	}
	defer row.close()
	c, w, kubeconfig := row.c, row.w, row.kubeconfig
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return res, err
	}
	if err := installShardedRole(ctx, c, root, row.dir); err != nil {
		return res, err
	}
	if err := s.warmUp(ctx, row, false); err != nil {
		return res, err
	}
	var self time.Duration
	res.Floor, res.FloorCPU, err = s.floor(ctx, c, w, "floor-sharded", n, &res.FloorRetries, &self, fmt.Sprintf("apiserver-cpu-sharded-%d-floor.pb.gz", n))
	if err != nil {
		return res, fmt.Errorf("floor: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bench:   floor: %v, API server + etcd CPU %v\n", res.Floor.Round(100*time.Millisecond), res.FloorCPU.Round(100*time.Millisecond))
	// The unsharded controller first: the same run's yardstick.
	for i, r := range append([]int{1}, replicas...) {
		count := shards
		if i == 0 {
			count = 1
		}
		row, err := s.shardedRun(ctx, c, w, kubeconfig, n, count, r)
		if err != nil {
			return res, fmt.Errorf("%d replicas: %w", r, err)
		}
		fmt.Fprintf(os.Stderr, "bench:   %d replicas × %d shards: settled in %v, converged in %v\n", r, count, row.Settle.Round(100*time.Millisecond), row.Converge.Round(100*time.Millisecond))
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// installShardedRole widens the controller's Lease grant as the sharded
// overlay does (artifacts/sharded): the replicas get and update shard
// and member Leases of any name. The Role is taken from the overlay's own output, so
// the bench runs with exactly the grant that ships.
func installShardedRole(ctx context.Context, c *localcluster.Cluster, root, dir string) error {
	out, err := c.Kubectl(ctx, "kustomize", filepath.Join(root, "artifacts", "sharded"))
	if err != nil {
		return fmt.Errorf("kubectl kustomize artifacts/sharded: %w", err)
	}
	for doc := range strings.SplitSeq(out, "\n---\n") {
		if strings.Contains(doc, "\nkind: Role\n") && strings.Contains(doc, "name: bar-controller-leader-election\n") {
			path := filepath.Join(dir, "sharded-role.yaml")
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				return err
			}
			_, err := c.Kubectl(ctx, "apply", "--server-side", "-f", path)
			return err
		}
	}
	return fmt.Errorf("artifacts/sharded renders no Role bar-controller-leader-election")
}

// replica is one running replica of a sharded configuration.
type replica struct {
	p           *localcluster.Process
	metricsAddr string
}

func (s scenario) shardedRun(ctx context.Context, c *localcluster.Cluster, w writers, kubeconfig string, n, shards, count int) (row shardedRow, err error) {
	row.Replicas, row.Shards, row.N = count, shards, n
	ns := fmt.Sprintf("bench-sharded-%d-of-%d", count, shards)
	if err := createNamespace(ctx, w.kube, ns); err != nil {
		return row, err
	}
	s.step(ns + ": start")
	start := time.Now()
	var reps []replica
	defer func() {
		for _, r := range reps {
			r.p.Stop(30 * time.Second)
		}
	}()
	for i := range count {
		name := fmt.Sprintf("sharded-%d-of-%d-%d", i, count, shards)
		// Named, as Pods are, so that each has its own member Lease; the
		// Leases live where the shipped Role grants them. Unsharded, the
		// controller runs as in the main table, alone and without a Lease.
		args := []string{"--profiling"}
		if shards > 1 {
			args = append(args, "--leader-elect", "--leader-elect-lease-namespace="+localcluster.ControllerNamespace, fmt.Sprintf("--shards=%d", shards))
		}
		p, addr, err := s.startControllerEnv(kubeconfig, name, []string{"POD_NAME=" + name}, args...)
		if err != nil {
			return row, err
		}
		reps = append(reps, replica{p: p, metricsAddr: addr})
	}
	if shards > 1 {
		if err := waitShardsShared(ctx, reps, c.Config.BearerToken, shards); err != nil {
			return row, err
		}
	}
	row.Settle = time.Since(start)

	watcher, err := watchConvergence(ctx, c.Config, ns)
	if err != nil {
		return row, err
	}
	defer watcher.stop()
	atStart, err := scrapeRequests(c)
	if err != nil {
		return row, err
	}
	cpu0, err := serverCPU(c)
	if err != nil {
		return row, err
	}
	s.step(ns)
	begin := time.Now()
	if err := createBars(ctx, w.bars, ns, n, s.inflight); err != nil {
		return row, err
	}
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, 30*time.Minute, true, func(context.Context) (bool, error) {
		return watcher.converged() == n, nil
	}); err != nil {
		return row, fmt.Errorf("waiting for %d Bars to converge (%d did): %w", n, watcher.converged(), err)
	}
	row.Converge = time.Since(begin)
	cpu1, err := serverCPU(c)
	if err != nil {
		return row, err
	}
	row.ServerCPU = cpu1 - cpu0

	s.step(ns + ": Events")
	isEvent := func(res string) bool { return res == "events" }
	var after requests
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, eventsTimeout, true, func(context.Context) (bool, error) {
		var err error
		after, err = scrapeRequests(c)
		return err == nil && after.since(atStart).writes(isEvent) >= float64(n), err
	})
	if after == nil {
		return row, err
	}
	run := after.since(atStart)
	run["POST bars"] -= float64(n)
	per := func(keep func(string) bool) float64 { return run.writes(keep) / float64(n) }
	row.DeploymentWrites = per(func(res string) bool { return res == "deployments" })
	row.StatusWrites = per(func(res string) bool { return res == "bars/status" })
	row.EventWrites = per(isEvent)
	// Lease renewals are the replicas' own upkeep, not per Bar.
	row.OtherWrites = per(func(res string) bool {
		return res != "deployments" && res != "bars/status" && res != "events" && res != "leases"
	})

	for i, r := range reps {
		s.step(fmt.Sprintf("%s: replica %d idle", ns, i))
		if _, err := waitQueueEmpty(ctx, r.metricsAddr, c.Config.BearerToken, nil); err != nil {
			return row, fmt.Errorf("replica %d: %w", i, err)
		}
		u, err := readReplica(ctx, r, c.Config.BearerToken, filepath.Join(s.logDir, fmt.Sprintf("heap-sharded-%d-%d-of-%d-%d.pb.gz", n, i, count, shards)))
		if err != nil {
			return row, fmt.Errorf("replica %d: %w", i, err)
		}
		if shards == 1 {
			u.Bars = float64(n)
		}
		row.PerReplica = append(row.PerReplica, u)
	}
	watcher.stop()
	for _, r := range reps {
		r.p.Stop(30 * time.Second)
	}
	reps = nil
	s.step(ns + ": clean")
	return row, clean(ctx, w.kube, w.bars, ns)
}

// waitShardsShared waits until the replicas hold every shard between
// them, each its fair share (⌊N/R⌋ or ⌈N/R⌉), by their own metrics.
func waitShardsShared(ctx context.Context, reps []replica, token string, shards int) error {
	client := loopbackClient()
	low, high := shards/len(reps), (shards+len(reps)-1)/len(reps)
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		total, fair := 0.0, true
		var held []string
		for _, r := range reps {
			m, err := localcluster.Scrape(client, "https://"+r.metricsAddr+"/metrics", token)
			if err != nil {
				return false, err
			}
			h, _ := m.Value("bar_controller_shard_held", nil)
			total += h
			fair = fair && h >= float64(low) && h <= float64(high)
			held = append(held, fmt.Sprint(h))
		}
		last = strings.Join(held, ", ")
		return fair && total == float64(shards), nil
	})
	if err != nil {
		return fmt.Errorf("the replicas did not share %d shards out (held: %s): %w", shards, last, err)
	}
	return nil
}

// readReplica reads one idle replica's share and cost.
func readReplica(ctx context.Context, r replica, token, heapProfile string) (u replicaUsage, err error) {
	client := loopbackClient()
	m, err := localcluster.Scrape(client, "https://"+r.metricsAddr+"/metrics", token)
	if err != nil {
		return u, err
	}
	u.Shards, _ = m.Value("bar_controller_shard_held", nil)
	u.Bars, _ = m.Value("bar_controller_shard_bars", nil)
	u.Kept, _ = m.Value("bar_controller_shard_watch_events_total", map[string]string{"outcome": "kept"})
	u.Dropped, _ = m.Value("bar_controller_shard_watch_events_total", map[string]string{"outcome": "dropped"})
	if u.PeakRSS, u.CPU, err = usage(r.p.Pid()); err != nil {
		return u, err
	}
	if u.Read, err = bytesRead(r.p.Pid()); err != nil {
		return u, err
	}
	heap, err := liveHeap(ctx, r.metricsAddr, token, heapProfile, 6)
	u.Live = heap.Live
	return u, err
}

// bytesRead is rchar of /proc/<pid>/io: every byte the process's read
// calls returned, sockets and files alike.
func bytesRead(pid int) (int64, error) {
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(io)) {
		if v, ok := strings.CutPrefix(line, "rchar:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io has no rchar", pid)
}

// matchCost measures, with testing.Benchmark, the API server's own match
// of a Bar against a shard selector: the selector as its parser builds it
// (k8s.io/apiserver/pkg/sharding), the Bar as a watch event carries it.
// The watch cache makes this test for every sharded watcher of a
// resource and every event (filterWithAttrsAndPrefixFunction in
// k8s.io/apiserver/pkg/storage/cacher/cacher.go): N shard watches, N
// matches per event.
func matchCost() (time.Duration, error) {
	sel, err := apisharding.Parse(shards.Shard{Index: 0, Count: 2}.BarSelector())
	if err != nil {
		return 0, err
	}
	bar := benchBar("ns", 0)
	bar.UID = uuid.NewUUID()
	var matchErr error
	r := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			if _, err := sel.Matches(bar); err != nil {
				matchErr = err
			}
		}
	})
	return time.Duration(r.NsPerOp()), matchErr
}
