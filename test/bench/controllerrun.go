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
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// controllerRun is run i of the controller, in a namespace of its own:
// the same Bar creates as the floor's, until all converged and all their
// Events are written. The last run is followed by the idle check; then
// the Bars and Deployments go, so that the next floor starts from what
// this one did.
func (s scenario) controllerRun(ctx context.Context, c *localcluster.Cluster, w writers, kubeconfig string, r *result, i int) error {
	ns, n := s.runName(i), r.N
	last := i == s.rounds-1 && !s.coldOnly
	newNamespace := createNamespace
	if s.warm {
		newNamespace = reuseNamespace
	}
	if err := newNamespace(ctx, w.kube, ns); err != nil {
		return err
	}
	// The controller with its shipped defaults; only where it listens,
	// which API server it talks to and as whom are set.
	before, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	ctl, metricsAddr, err := s.startController(kubeconfig, "controller-"+ns, "--profiling")
	if err != nil {
		return err
	}
	defer ctl.Stop(30 * time.Second)
	watcher, err := watchConvergence(ctx, c.Config, ns)
	if err != nil {
		return err
	}
	defer watcher.stop()
	atStart, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	cpu0, err := serverCPU(c)
	if err != nil {
		return err
	}
	s.step(ns)
	base, save := "https://"+metricsAddr, fmt.Sprintf("cpu-%d-%d-%s.pb.gz", n, r.Unrelated, ns)
	if s.apiServerProfile {
		base, save = c.Server, "apiserver-"+save
	}
	profiled := s.profileCPU(ctx, base, c.Config.BearerToken, filepath.Join(s.logDir, save))
	waitProfile := sync.OnceFunc(func() {
		if err := <-profiled; err != nil {
			fmt.Fprintln(os.Stderr, "bench: CPU profile:", err)
		}
	})
	defer waitProfile()
	var peak <-chan peakMemory
	stopSampling := func() {}
	// The GC headroom part's runs, and the run a restart is compared with.
	sample := s.samplePeak || (last && s.steadyAt(r))
	if sample {
		var sctx context.Context
		sctx, stopSampling = context.WithCancel(ctx)
		defer stopSampling()
		peak = samplePeak(sctx, metricsAddr, c.Config.BearerToken, peakSampleInterval)
	}
	_, self0, _ := usage(os.Getpid())
	start := time.Now()
	if err := createBars(ctx, w.bars, ns, n, s.inflight); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, 30*time.Minute, true, func(context.Context) (bool, error) {
		return watcher.converged() == n, nil
	}); err != nil {
		return fmt.Errorf("waiting for %d Bars to converge (%d did): %w", n, watcher.converged(), err)
	}
	converged := time.Now()
	_, self1, _ := usage(os.Getpid())
	r.ControllerBenchCPU = append(r.ControllerBenchCPU, self1-self0)
	r.Controllers = append(r.Controllers, converged.Sub(start))
	cpu1, err := serverCPU(c)
	if err != nil {
		return err
	}
	r.ControllerServerCPU = append(r.ControllerServerCPU, cpu1-cpu0)

	// The recorder writes Events on its own, after the syncs: wait for
	// all n (one per new Bar), then count every write.
	s.step(ns + ": Events")
	isEvent := func(res string) bool { return res == "events" }
	var after requests
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, eventsTimeout, true, func(context.Context) (bool, error) {
		var err error
		after, err = scrapeRequests(c)
		return err == nil && after.since(atStart).writes(isEvent) >= float64(n), err
	})
	if after == nil {
		return err
	}
	r.EventsAfter = append(r.EventsAfter, time.Since(converged))
	if missing := float64(n) - after.since(atStart).writes(isEvent); missing > 0 {
		r.EventsMissing += missing
		fmt.Fprintf(os.Stderr, "bench: run %d: %v of %d Events not written %v after convergence\n", i, missing, n, eventsTimeout)
	}
	run := after.since(atStart)
	run["POST bars"] -= float64(n) // the bench's own creates
	// And what its scrapes of the controller's metrics had the API server
	// write (peakmemory.go): a TokenReview and a SubjectAccessReview a
	// minute, which store nothing.
	delete(run, "POST tokenreviews")
	delete(run, "POST subjectaccessreviews")
	per := func(keep func(string) bool) float64 { return run.writes(keep) / float64(n) / float64(s.rounds) }
	r.DeploymentWrites += per(func(res string) bool { return res == "deployments" })
	r.StatusWrites += per(func(res string) bool { return res == "bars/status" })
	r.EventWrites += per(isEvent)
	r.OtherWrites += per(func(res string) bool { return res != "deployments" && res != "bars/status" && res != "events" })
	if detail := run.describe(); r.WritesDetail == "" {
		r.WritesDetail = detail
	} else if detail != r.WritesDetail {
		r.WritesDetail += "; run " + fmt.Sprint(i) + ": " + detail
	}
	rss, cpu, err := usage(ctl.Pid())
	if err != nil {
		return err
	}
	r.PeakRSS = max(r.PeakRSS, rss)
	if sample {
		stopSampling()
		r.Peak = <-peak
	}
	r.CPU += cpu / time.Duration(s.rounds)
	// After the peak is read: the profile's collection cannot lower it.
	// And once the controller is idle: convergence is when the last Bar
	// was done, not when the controller stopped working (each Deployment
	// it created comes back as a watch event and syncs its Bar once more,
	// writing nothing), and a collection counts as live everything
	// allocated while it marks, so a profile taken amid those syncs counts
	// their garbage too.
	idleAfter, err := waitQueueEmpty(ctx, metricsAddr, c.Config.BearerToken, map[string]string{"name": "bars"})
	if err != nil {
		return err
	}
	r.QueueEmptyAfter = append(r.QueueEmptyAfter, time.Since(converged))
	fmt.Fprintf(os.Stderr, "bench: run %d: work queue empty %v after convergence (waited %v for it)\n", i, time.Since(converged).Round(100*time.Millisecond), idleAfter.Round(100*time.Millisecond))
	// The admin may get the profile; the bench is its only reader.
	if r.Heap, err = liveHeap(ctx, metricsAddr, c.Config.BearerToken, filepath.Join(s.logDir, fmt.Sprintf("heap-%d-%d-%s.pb.gz", n, r.Unrelated, ns)), 6); err != nil {
		return err
	}
	// The API server counts a WATCH when it ends: stop the bench's own
	// watcher (one watch of Bars, one of Deployments) and the controller
	// first, then count.
	watcher.stop()
	ctl.Stop(30 * time.Second)
	time.Sleep(time.Second)
	stopped, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	reads := stopped.since(before)
	ours := func(res string) bool { return res == "bars" || res == "deployments" }
	r.Lists = reads.count("LIST", ours)
	r.Watches = reads.count("WATCH", ours) - float64(watcher.watches.Load())
	r.WatchLists = reads.count(watchList, ours) - float64(watcher.watchLists.Load())

	// A profile longer than the run ends before the idle check and the
	// clean: their work is not the run's.
	waitProfile()
	if last {
		s.step(ns + ": idle")
		if err := s.idle(c, kubeconfig, r); err != nil {
			return err
		}
		if s.steadyAt(r) {
			if err := s.steadyStep(ctx, c, w, kubeconfig, ns, r); err != nil {
				return fmt.Errorf("steady state: %w", err)
			}
		}
	}
	s.step(ns + ": clean")
	return clean(ctx, w.kube, w.bars, ns)
}

// idle: a controller with a short resync period over converged Bars
// must write nothing, neither when it starts (its relist) nor when its
// resyncs re-check every Bar.
func (s scenario) idle(c *localcluster.Cluster, kubeconfig string, r *result) error {
	beforeRestart, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	idle, _, err := s.startController(kubeconfig, s.runName(0)[:4]+"-idle", "--resync-period="+s.idleResync.String())
	if err != nil {
		return err
	}
	defer idle.Stop(30 * time.Second)
	time.Sleep(2 * time.Second) // the first syncs after the relist
	atIdle, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	time.Sleep(2*s.idleResync + time.Second)
	end, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	all := func(string) bool { return true }
	r.RestartWrites = atIdle.since(beforeRestart).writes(all)
	r.IdleWrites = end.since(atIdle).writes(all)
	return nil
}

// waitQueueEmpty waits until the controller's work queues that match
// queue are empty and no worker holds a key (workqueue_depth and
// workqueue_unfinished_work_seconds summed over them both 0, twice in a
// row a second apart), and returns how long that took. A nil queue
// matches every queue: a sharded replica has one per shard it holds.
func waitQueueEmpty(ctx context.Context, metricsAddr, token string, queue map[string]string) (time.Duration, error) {
	client := loopbackClient()
	// Uncompressed: the gzip writers the metrics handler would pool for
	// these scrapes would show in the live heap taken next.
	client.Transport.(*http.Transport).DisableCompression = true
	start, quiet := time.Now(), 0
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
		m, err := localcluster.Scrape(client, "https://"+metricsAddr+"/metrics", token)
		if err != nil {
			return false, err
		}
		depth, ok1 := m.Value("workqueue_depth", queue)
		busy, ok2 := m.Value("workqueue_unfinished_work_seconds", queue)
		if !ok1 || !ok2 {
			return false, fmt.Errorf("the controller's metrics have no workqueue_depth or workqueue_unfinished_work_seconds for the queues %v", queue)
		}
		if depth == 0 && busy == 0 {
			quiet++
		} else {
			quiet = 0
		}
		return quiet == 2, nil
	})
	return time.Since(start), err
}

// launchController starts bar-controller and returns at once, with the
// addresses of its metrics and health endpoints: what happens before it
// is ready (its informers' lists) can be watched from there.
func (s scenario) launchController(kubeconfig, name string, env []string, extra ...string) (p *localcluster.Process, metricsAddr, healthAddr string, err error) {
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		return nil, "", "", err
	}
	args := append([]string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1]}, extra...)
	args = append(args, s.extraArgs...)
	p, err = localcluster.StartProcess(name, s.controller, filepath.Join(s.logDir, name+".log"), env, args...)
	return p, addrs[0], addrs[1], err
}

// waitControllerReady waits for a launched controller's /readyz; if it
// never comes, the controller is stopped.
func waitControllerReady(p *localcluster.Process, healthAddr string) error {
	// A bound, not a measure: the idle check's controller first lists (by
	// WatchList) every Bar and Deployment of the row, 150,000 objects at N=50,000.
	err := p.WaitReady(context.Background(), 5*time.Minute, func(ctx context.Context) error {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
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
	return err
}
