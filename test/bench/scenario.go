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
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/internal/testcluster"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
)

// result is one scenario's measurements.
type result struct {
	N, Unrelated int
	// Floor and Controller are the times from the first create until
	// every Bar is done: for the floor, its three writes returned; for the
	// controller, its Deployment is as desired and its status current.
	Floor, Controller time.Duration
	// Writes are the controller run's writes by kind, per Bar, from the
	// API server's counters (the Bar creates excluded).
	DeploymentWrites, StatusWrites, EventWrites, OtherWrites float64
	WritesDetail                                             string
	// RestartWrites are the writes of a second controller started over
	// the converged Bars (a relist); IdleWrites those over two of its
	// resync periods with nothing changing.
	RestartWrites, IdleWrites float64
	// Lists and Watches are what the controller asked of the API server
	// for Bars and Deployments, from its start until convergence.
	Lists, Watches float64
	// PeakRSS is the controller's VmHWM; CPU its user+system time.
	PeakRSS int64
	CPU     time.Duration
	// Heap is the controller's live heap once converged (heap.go).
	Heap heapSummary
	// FloorServerCPU and ControllerServerCPU are what kube-apiserver and
	// etcd spent (user+system) over the floor and over the controller
	// run: the work each asked of the API server, which timing noise
	// does not change.
	FloorServerCPU, ControllerServerCPU time.Duration
}

type scenario struct {
	binDir, crdDir, controller string
	inflight                   int
	idleResync                 time.Duration
	logDir                     string
}

func (s scenario) run(ctx context.Context, n, unrelated int) (r result, err error) {
	r.N, r.Unrelated = n, unrelated
	dir, err := os.MkdirTemp("", "bar-bench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	c, err := testcluster.Start(ctx, testcluster.Options{BinDir: s.binDir, Dir: dir, CRDs: []string{s.crdDir}})
	if err != nil {
		return r, err
	}
	defer c.Stop()
	// The bench's own client is never the bottleneck: no client-side limit.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	kube := kubernetes.NewForConfigOrDie(cfg)
	bars := clientset.NewForConfigOrDie(cfg)
	for _, ns := range []string{"warmup", "floor", "bench"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return r, err
		}
	}
	if unrelated > 0 {
		if err := createUnrelated(ctx, kube, unrelated, s.inflight); err != nil {
			return r, fmt.Errorf("unrelated Deployments: %w", err)
		}
	}
	// Warm-up: the API server's caches, connections and the CRD's
	// handlers, before anything is timed.
	if err := runFloor(ctx, writers{kube, bars}, "warmup", 300, s.inflight); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if err := clean(ctx, kube, bars, "warmup"); err != nil {
		return r, err
	}

	cpu0, err := serverCPU(c)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if err := runFloor(ctx, writers{kube, bars}, "floor", n, s.inflight); err != nil {
		return r, fmt.Errorf("floor: %w", err)
	}
	r.Floor = time.Since(start)
	cpu1, err := serverCPU(c)
	if err != nil {
		return r, err
	}
	r.FloorServerCPU = cpu1 - cpu0
	if err := clean(ctx, kube, bars, "floor"); err != nil {
		return r, err
	}

	// The controller with its shipped defaults; only where it listens
	// and which API server it talks to are set.
	before, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	ctl, metricsAddr, err := s.startController(c, "controller", "--profiling")
	if err != nil {
		return r, err
	}
	defer ctl.Stop(30 * time.Second)
	watcher, err := watchConvergence(ctx, c.Config, "bench")
	if err != nil {
		return r, err
	}
	defer watcher.stop()
	atStart, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	if cpu0, err = serverCPU(c); err != nil {
		return r, err
	}
	start = time.Now()
	if err := createBars(ctx, bars, "bench", n, s.inflight); err != nil {
		return r, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
		return watcher.converged() == n, nil
	}); err != nil {
		return r, fmt.Errorf("waiting for %d Bars to converge (%d did): %w", n, watcher.converged(), err)
	}
	r.Controller = time.Since(start)
	if cpu1, err = serverCPU(c); err != nil {
		return r, err
	}
	r.ControllerServerCPU = cpu1 - cpu0
	// Events are written asynchronously by the recorder: let them land.
	time.Sleep(2 * time.Second)
	after, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	run := after.since(atStart)
	run["POST bars"] -= float64(n) // the bench's own creates
	per := func(keep func(string) bool) float64 { return run.writes(keep) / float64(n) }
	r.DeploymentWrites = per(func(res string) bool { return res == "deployments" })
	r.StatusWrites = per(func(res string) bool { return res == "bars/status" })
	r.EventWrites = per(func(res string) bool { return res == "events" })
	r.OtherWrites = per(func(res string) bool { return res != "deployments" && res != "bars/status" && res != "events" })
	r.WritesDetail = run.describe()
	if r.PeakRSS, r.CPU, err = usage(ctl.Pid()); err != nil {
		return r, err
	}
	// After the peak is read: the profile's collection cannot lower it.
	if r.Heap, err = liveHeap(ctx, metricsAddr, c.Config.BearerToken, 6); err != nil {
		return r, err
	}
	// The API server counts a WATCH when it ends: stop the bench's own
	// watcher (one watch of Bars, one of Deployments) and the controller
	// first, then count.
	watcher.stop()
	ctl.Stop(30 * time.Second)
	time.Sleep(time.Second)
	stopped, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	reads := stopped.since(before)
	ours := func(res string) bool { return res == "bars" || res == "deployments" }
	r.Lists, r.Watches = reads.count("LIST", ours), reads.count("WATCH", ours)-2

	// Idle: a controller with a short resync period over converged Bars
	// must write nothing, neither when it starts (its relist) nor when
	// its resyncs re-check every Bar.
	beforeRestart, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	idle, _, err := s.startController(c, "idle", "--resync-period="+s.idleResync.String())
	if err != nil {
		return r, err
	}
	defer idle.Stop(30 * time.Second)
	time.Sleep(2 * time.Second) // the first syncs after the relist
	atIdle, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	time.Sleep(2*s.idleResync + time.Second)
	end, err := scrapeRequests(c)
	if err != nil {
		return r, err
	}
	all := func(string) bool { return true }
	r.RestartWrites = atIdle.since(beforeRestart).writes(all)
	r.IdleWrites = end.since(atIdle).writes(all)
	return r, nil
}

// startController starts bar-controller against c, waits for /readyz and
// returns the address of its metrics endpoint.
func (s scenario) startController(c *testcluster.Cluster, name string, extra ...string) (*testcluster.Process, string, error) {
	addrs, err := testcluster.FreeAddrs(2)
	if err != nil {
		return nil, "", err
	}
	args := append([]string{"--kubeconfig=" + c.Kubeconfig, "--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1]}, extra...)
	p, err := testcluster.StartProcess(name, s.controller, filepath.Join(s.logDir, name+".log"), nil, args...)
	if err != nil {
		return nil, "", err
	}
	err = p.WaitReady(context.Background(), time.Minute, func(ctx context.Context) error {
		resp, err := http.Get("http://" + addrs[1] + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		p.Stop(5 * time.Second)
	}
	return p, addrs[0], err
}

// serverCPU is the CPU time kube-apiserver and etcd have used so far.
func serverCPU(c *testcluster.Cluster) (time.Duration, error) {
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
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	var hwm int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			hwm = kb * 1024
		}
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

// convergence watches the bench namespace and counts the Bars that are
// done: status.observedGeneration current, and a Deployment they control
// with the replicas and image they ask for.
type convergence struct {
	bars        cache.Indexer
	deployments cache.Indexer
	cancel      context.CancelFunc
}

func watchConvergence(ctx context.Context, cfg *rest.Config, ns string) (*convergence, error) {
	ctx, cancel := context.WithCancel(ctx)
	// The bench's watch is overhead on the API server that the floor does
	// not pay: Deployments come as protobuf, the cheapest encoding the API
	// server has for them (Bars, a custom resource, have only JSON).
	kubeCfg := rest.CopyConfig(cfg)
	kubeCfg.ContentType = runtime.ContentTypeProtobuf
	kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kf := kubeinformers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(kubeCfg), 0, kubeinformers.WithNamespace(ns))
	bf := informers.NewSharedInformerFactoryWithOptions(clientset.NewForConfigOrDie(cfg), 0, informers.WithNamespace(ns))
	c := &convergence{
		bars:        bf.Barcontroller().V1alpha1().Bars().Informer().GetIndexer(),
		deployments: kf.Apps().V1().Deployments().Informer().GetIndexer(),
		cancel:      cancel,
	}
	kf.Start(ctx.Done())
	bf.Start(ctx.Done())
	for _, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("deployment cache did not sync")
		}
	}
	for _, ok := range bf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("bar cache did not sync")
		}
	}
	return c, nil
}

func (c *convergence) converged() int {
	done := 0
	for _, o := range c.bars.List() {
		bar := o.(*barv1alpha1.Bar)
		if bar.Status.ObservedGeneration != bar.Generation {
			continue
		}
		o, ok, _ := c.deployments.GetByKey(bar.Namespace + "/" + bar.Spec.DeploymentName)
		if !ok {
			continue
		}
		dep := o.(*appsv1.Deployment)
		if !metav1.IsControlledBy(dep, bar) || ptr.Deref(dep.Spec.Replicas, 1) != ptr.Deref(bar.Spec.Replicas, 1) ||
			len(dep.Spec.Template.Spec.Containers) != 1 || dep.Spec.Template.Spec.Containers[0].Image != bar.Spec.Image {
			continue
		}
		done++
	}
	return done
}

func (c *convergence) stop() { c.cancel() }
