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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// result is one scenario's measurements.
type result struct {
	N, Unrelated int
	// Floors and Controllers are the times from the first create until
	// every Bar is done: for the floor, its three writes returned; for the
	// controller, its Deployment is as desired and its status current.
	// They ran interleaved on one control plane: floor, controller run,
	// floor, ..., floor, so that a drift of the machine shows in both.
	Floors, Controllers []time.Duration
	// EventsAfter is, per controller run, how long after convergence the
	// last of its Events (one per Bar) was written; EventsMissing counts
	// those still missing after eventsTimeout.
	EventsAfter   []time.Duration
	EventsMissing float64
	// Writes are the controller runs' writes by kind, per Bar (the mean
	// over the runs), from the API server's counters (the Bar creates
	// excluded), counted once every Event has been written.
	DeploymentWrites, StatusWrites, EventWrites, OtherWrites float64
	WritesDetail                                             string
	// RestartWrites are the writes of a controller started over the
	// converged Bars of the last run (a relist); IdleWrites those over two
	// of its resync periods with nothing changing.
	RestartWrites, IdleWrites float64
	// Lists and Watches are what the last run's controller asked of the
	// API server for Bars and Deployments, from its start until it stopped;
	// WatchLists are the watches among them that began with a list (the
	// initial list, or a relist), by apiserver_watch_list_duration_seconds.
	Lists, Watches, WatchLists float64
	// PeakRSS is the largest VmHWM of the runs' controllers; CPU their
	// mean user+system time.
	PeakRSS int64
	CPU     time.Duration
	// Heap is the last run's controller's live heap once converged and
	// idle (heap.go); QueueEmptyAfter is, per run, how long after
	// convergence its work queue was empty, when the profile was taken.
	Heap heapSummary
	// Peak is what the controller's memory was made of at its highest
	// sampled RSS, in the runs that sample it (scenario.samplePeak).
	Peak            peakMemory
	QueueEmptyAfter []time.Duration
	// FloorServerCPU and ControllerServerCPU are what kube-apiserver and
	// etcd spent (user+system) over each floor and each controller run:
	// the work each asked of the API server.
	FloorServerCPU, ControllerServerCPU []time.Duration
	// FloorBenchCPU and ControllerBenchCPU are the bench's own CPU over
	// each: its writes in a floor, its Bar creates and convergence watch
	// in a run. It shares the two cores with what it measures.
	FloorBenchCPU, ControllerBenchCPU []time.Duration
	// FloorRetries counts the floors' requests done again after a timeout
	// or a lost connection (runFloor); the floors' times include them.
	FloorRetries int
	// Steady is the row's steady step (steady.go), if it had one.
	Steady *steady
	// Peer is the controller-runtime peer's runs of the row (peer.go),
	// whose Floors are this row's.
	Peer *result
}

type scenario struct {
	binDir, crdDir, controller string
	inflight                   int
	idleResync                 time.Duration
	logDir                     string
	// rounds is the number of controller runs per scenario, each between
	// two floors.
	rounds int
	// cpuProfile, when not zero, is how long each controller run's CPU
	// profile lasts, from the first Bar create (--cpu-profile).
	cpuProfile time.Duration
	// apiServerProfile: the CPU profiles are the API server's, of each
	// floor and each controller run alike (the same process serves both,
	// so their profiles compare).
	apiServerProfile bool
	// observeFloors: each floor carries the bench's convergence watch and
	// ends when it has seen every Bar done, as a controller run does
	// (--observe-floors), so that the ratio leaves out what the watch
	// costs the API server and the bench; the reports' floors carry none.
	observeFloors bool
	// extraArgs are added to every controller's flags (--controller-args).
	extraArgs []string
	// churnN is the row (of no unrelated Deployments) that gets the
	// steady step, each churn phase lasting churnFor at each of
	// churnRates changes a second (--churn-*).
	churnN     int
	churnFor   time.Duration
	churnRates []int
	// peer is the controller-runtime peer's binary (--peer), run beside
	// the controller in the rows of no unrelated Deployments; isPeer
	// marks the scenario that runs it (peerScenario).
	peer   string
	isPeer bool
	// coldOnly: a controller run is a cold start only, with no idle
	// check or steady step after it (gcheadroom.go).
	coldOnly bool
	// samplePeak: every controller run scrapes the controller's memory
	// figures until its peak RSS is read, and keeps the highest
	// (peakmemory.go), into result.Peak; without it only the run before
	// the steady step does.
	samplePeak bool
	// warm: the run is the warm-up's (row.go), named warmup-bench or
	// warmup-peer and measured by nobody.
	warm bool
	// step names what the row is doing now, for its monitor (monitor.go).
	step func(string)
}

// eventsTimeout bounds the wait for a run's Events after convergence.
const eventsTimeout = 2 * time.Minute

func (s scenario) run(ctx context.Context, n, unrelated int) (r result, err error) {
	r.N, r.Unrelated = n, unrelated
	row, err := s.newRow(ctx, fmt.Sprintf("%d-%d", n, unrelated), nil)
	if err != nil {
		return r, err
	}
	defer row.close()
	c, w, kubeconfig := row.c, row.w, row.kubeconfig
	if unrelated > 0 {
		if err := createUnrelated(ctx, w.kube, unrelated, s.inflight); err != nil {
			return r, fmt.Errorf("unrelated Deployments: %w", err)
		}
	}
	warm := s
	if unrelated != 0 {
		warm.peer = "" // the peer runs only in rows of no unrelated Deployments
	}
	if err := warm.warmUp(ctx, row, true); err != nil {
		return r, err
	}

	for i := 0; ; i++ {
		var self time.Duration
		profile := fmt.Sprintf("apiserver-cpu-%d-%d-floor%d.pb.gz", n, r.Unrelated, i)
		took, cpu, err := s.floor(ctx, c, w, fmt.Sprintf("floor-%d", i), n, &r.FloorRetries, &self, profile)
		if err != nil {
			return r, fmt.Errorf("floor %d: %w", i, err)
		}
		r.Floors, r.FloorServerCPU, r.FloorBenchCPU = append(r.Floors, took), append(r.FloorServerCPU, cpu), append(r.FloorBenchCPU, self)
		// Each step as it ends: a row that fails later still leaves these.
		fmt.Fprintf(os.Stderr, "bench:   floor %d: %v, API server + etcd CPU %v, the bench's own %v\n", i, took.Round(100*time.Millisecond), cpu.Round(100*time.Millisecond), self.Round(100*time.Millisecond))
		if i == s.rounds {
			break
		}
		if err := s.runs(ctx, c, w, kubeconfig, &r, i); err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "bench:   controller run %d: converged in %v, API server + etcd CPU %v, the bench's own %v, peak RSS so far %.1f MB, live heap %.1f MB\n",
			i, r.Controllers[i].Round(100*time.Millisecond), r.ControllerServerCPU[i].Round(100*time.Millisecond), r.ControllerBenchCPU[i].Round(100*time.Millisecond), mb(r.PeakRSS), mb(r.Heap.Live))
	}
	return r, nil
}

// runs is round i's controller run, and the peer's if it has one, in
// turn: bar-controller first in even rounds, the peer in odd ones, so
// that a drift of the machine falls on both alike.
//
// A run followed by the steady step ends with the API server restarted
// (steady.go), a fresh one: it is warmed up again, as the row's first was,
// before the next timed step, so that no timed step pays what a fresh API
// server does once. (At 2,000 Bars in make bench bar-controller's second
// run follows the peer's steady step; the churn before it is not undone.)
func (s scenario) runs(ctx context.Context, c *localcluster.Cluster, w writers, kubeconfig string, r *result, i int) error {
	rewarm := func() error {
		if i != s.rounds-1 || !s.steadyAt(r) {
			return nil
		}
		warm := s
		if r.Unrelated != 0 {
			warm.peer = ""
		}
		return warm.warmUp(ctx, &row{c: c, w: w, kubeconfig: kubeconfig}, true)
	}
	ours := func() error {
		if err := s.controllerRun(ctx, c, w, kubeconfig, r, i); err != nil {
			return fmt.Errorf("controller run %d: %w", i, err)
		}
		return rewarm()
	}
	if s.peer == "" || r.Unrelated != 0 {
		return ours()
	}
	if r.Peer == nil {
		if err := grantPeer(ctx, w.kube); err != nil {
			return fmt.Errorf("the peer's grant: %w", err)
		}
		r.Peer = &result{N: r.N}
	}
	peer := func() error {
		if err := s.peerScenario().controllerRun(ctx, c, w, kubeconfig, r.Peer, i); err != nil {
			return fmt.Errorf("peer run %d: %w", i, err)
		}
		fmt.Fprintf(os.Stderr, "bench:   peer run %d: converged in %v, peak RSS so far %.1f MB, live heap %.1f MB\n",
			i, r.Peer.Controllers[i].Round(100*time.Millisecond), mb(r.Peer.PeakRSS), mb(r.Peer.Heap.Live))
		return rewarm()
	}
	first, second := ours, peer
	if i%2 == 1 {
		first, second = peer, ours
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}

func createNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// floor runs the floor in a namespace of its own, then removes what it
// made, and returns its time and the API server's CPU over it.
func (s scenario) floor(ctx context.Context, c *localcluster.Cluster, w writers, ns string, n int, retries *int, self *time.Duration, profile string) (time.Duration, time.Duration, error) {
	if err := createNamespace(ctx, w.kube, ns); err != nil {
		return 0, 0, err
	}
	// Opened before the CPU is read, as a controller run's is.
	var watcher *convergence
	if s.observeFloors {
		var err error
		if watcher, err = watchConvergence(ctx, c.Config, ns); err != nil {
			return 0, 0, err
		}
		defer watcher.stop()
	}
	cpu0, err := serverCPU(c)
	if err != nil {
		return 0, 0, err
	}
	s.step(ns)
	var profiled <-chan error
	if s.apiServerProfile {
		profiled = s.profileCPU(ctx, c.Server, c.Config.BearerToken, filepath.Join(s.logDir, profile))
	}
	_, self0, _ := usage(os.Getpid())
	start := time.Now()
	again, err := runFloor(ctx, w, ns, n, s.inflight)
	if err != nil {
		return 0, 0, err
	}
	*retries += again
	if watcher != nil {
		if err := wait.PollUntilContextTimeout(ctx, pollInterval, 30*time.Minute, true, func(context.Context) (bool, error) {
			return watcher.converged() == n, nil
		}); err != nil {
			return 0, 0, fmt.Errorf("waiting for the watch to see %d Bars done (%d seen): %w", n, watcher.converged(), err)
		}
		watcher.stop() // before the clean, whose events are not the floor's
	}
	took := time.Since(start)
	_, self1, _ := usage(os.Getpid())
	*self = self1 - self0
	cpu1, err := serverCPU(c)
	if err != nil {
		return 0, 0, err
	}
	if profiled != nil {
		// Before the clean, whose work is not the floor's.
		if err := <-profiled; err != nil {
			fmt.Fprintln(os.Stderr, "bench: API server CPU profile:", err)
		}
	}
	s.step(ns + ": clean")
	return took, cpu1 - cpu0, clean(ctx, w.kube, w.bars, ns)
}

// startController starts bar-controller with kubeconfig, waits for /readyz and
// returns the address of its metrics endpoint.
func (s scenario) startController(kubeconfig, name string, extra ...string) (*localcluster.Process, string, error) {
	return s.startControllerEnv(kubeconfig, name, nil, extra...)
}

// startControllerEnv is startController with env added to the process's.
func (s scenario) startControllerEnv(kubeconfig, name string, env []string, extra ...string) (*localcluster.Process, string, error) {
	p, metricsAddr, healthAddr, err := s.launchController(kubeconfig, name, env, extra...)
	if err != nil {
		return nil, "", err
	}
	return p, metricsAddr, waitControllerReady(p, healthAddr)
}

// serverCPU is the CPU time kube-apiserver and etcd have used so far.
func serverCPU(c *localcluster.Cluster) (time.Duration, error) {
	var total time.Duration
	for _, name := range []string{"kube-apiserver", "etcd"} {
		pid, err := c.Pid(name)
		if err != nil {
			return 0, err
		}
		_, cpu, err := usage(pid)
		if err != nil {
			return 0, err
		}
		total += cpu
	}
	return total, nil
}

// usage reads a live process's peak resident set (VmHWM) and CPU time.
func usage(pid int) (int64, time.Duration, error) {
	hwm, err := memoryField(pid, "VmHWM")
	if err != nil {
		return 0, 0, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: utime and stime are the 12th and 13th of those.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on Linux for every architecture Go supports.
	return hwm, time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// memoryField reads one of the kB fields of /proc/<pid>/status (VmHWM,
// VmRSS), in bytes.
func memoryField(pid int, field string) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}
