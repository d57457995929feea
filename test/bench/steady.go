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
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The steady state of one row: after its last controller run and idle
// check, with the row's N Bars converged, a controller with the shipped
// defaults is started over them (a restart, as a rollout or a crash does
// it), then the Bars churn under it (churn.go), then the API server
// restarts under it.

// steady is what the steady step measured.
type steady struct {
	Restart    restartResult
	Churn      []churn
	APIRestart apiRestartResult
}

// restartResult is a controller started over N converged Bars.
type restartResult struct {
	// Ready is from its start to /readyz (its caches synced); SyncedOnce
	// to its queue drained having taken every Bar at least once.
	Ready, SyncedOnce time.Duration
	// Writes are every write the API server received meanwhile (the
	// target is none); PeakRSS the controller's VmHWM then, and
	// ConvergedRSS that of the row's controller runs, which converged the
	// Bars from nothing (the target: no higher).
	Writes                float64
	PeakRSS, ConvergedRSS int64
	// Peak and ConvergedPeak are what the restart's and the converged
	// run's highest sampled RSS were made of (peakmemory.go).
	Peak, ConvergedPeak peakMemory
	// ServerCPU is kube-apiserver's and etcd's CPU over it; Lists and
	// WatchLists the LISTs and the list-first watches of Bars and
	// Deployments it asked for.
	ServerCPU         time.Duration
	Lists, WatchLists float64
}

// apiRestartResult is the API server killed and restarted under the
// running, converged controller: every watch breaks. Counted from the
// restarted API server's own counters over apiRestartWatch. (A watch
// that resumed is counted when it ends, later; one that had to list
// again is a WatchList, counted as its list ends.)
type apiRestartResult struct {
	// Informers is how many the controller runs: one list each is a
	// relist, more a storm.
	Informers         int
	Down              time.Duration
	Writes            float64
	Lists, WatchLists float64
}

const apiRestartWatch = 30 * time.Second

// steadyAt reports whether row r gets the steady step.
func (s scenario) steadyAt(r *result) bool {
	return r.Unrelated == 0 && r.N == s.churnN && s.churnFor > 0
}

// steadyStep runs the steady step on the Bars of namespace ns.
func (s scenario) steadyStep(ctx context.Context, c *localcluster.Cluster, w writers, kubeconfig, ns string, r *result) error {
	st := &steady{}
	st.Restart.ConvergedRSS, st.Restart.ConvergedPeak = r.PeakRSS, r.Peak
	before, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	cpu0, err := serverCPU(c)
	if err != nil {
		return err
	}
	s.step(ns + ": restart")
	start := time.Now()
	ctl, metricsAddr, healthAddr, err := s.launchController(kubeconfig, ns+"-steady", nil)
	if err != nil {
		return err
	}
	defer ctl.Stop(30 * time.Second)
	// Its peak comes while its informers list, before it is ready: the
	// sampling starts with the process.
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	peak := samplePeak(sctx, metricsAddr, c.Config.BearerToken, peakSampleInterval)
	if err := waitControllerReady(ctl, healthAddr); err != nil {
		return err
	}
	st.Restart.Ready = time.Since(start)
	metricsURL, token := "https://"+metricsAddr+"/metrics", c.Config.BearerToken
	if err := waitSyncedOnce(ctx, metricsURL, token, r.N); err != nil {
		return err
	}
	st.Restart.SyncedOnce = time.Since(start)
	after, err := scrapeRequests(c)
	if err != nil {
		return err
	}
	cpu1, err := serverCPU(c)
	if err != nil {
		return err
	}
	if st.Restart.PeakRSS, _, err = usage(ctl.Pid()); err != nil {
		return err
	}
	stopSampling()
	st.Restart.Peak = <-peak
	d := after.since(before)
	ours := func(res string) bool { return res == "bars" || res == "deployments" }
	st.Restart.Writes = d.writes(controllerKinds)
	st.Restart.ServerCPU = cpu1 - cpu0
	st.Restart.Lists, st.Restart.WatchLists = d.count("LIST", ours), d.count(watchList, ours)
	fmt.Fprintf(os.Stderr, "bench:   restart over %d Bars: ready %v, every Bar synced %v, %v writes, peak RSS %.1f MB (converged run %.1f MB)\n",
		r.N, st.Restart.Ready.Round(10*time.Millisecond), st.Restart.SyncedOnce.Round(10*time.Millisecond), st.Restart.Writes, mb(st.Restart.PeakRSS), mb(r.PeakRSS))

	cw, err := newChurnWatch(ctx, w, ns)
	if err != nil {
		return err
	}
	defer cw.stop()
	for _, phase := range []string{"spec", "recreate"} {
		for _, rate := range s.churnRates {
			if phase == "recreate" && rate != s.churnRates[0] {
				continue // deletes at the lowest rate only: each is a whole new Deployment
			}
			s.step(fmt.Sprintf("%s: churn %s %d/s", ns, phase, rate))
			ch, err := runChurn(ctx, w, cw, phase, rate, s.churnFor, metricsURL, token)
			if err != nil {
				return fmt.Errorf("churn %s at %d/s: %w", phase, rate, err)
			}
			fmt.Fprintf(os.Stderr, "bench:   churn %s %d/s: %d changes, %d missed (%d of them the status only), to Deployment p50 %v p99 %v max %v, queue wait p99 %v, depth max %v\n",
				phase, rate, ch.Changes, ch.Missed, ch.MissedStatus, ch.ToDeployment.P50, ch.ToDeployment.P99, ch.ToDeployment.Max, ch.QueueWait, ch.MaxDepth)
			st.Churn = append(st.Churn, ch)
		}
	}
	cw.stop() // its watches are not the controller's

	s.step(ns + ": API server restart")
	if st.APIRestart, err = restartAPIServer(ctx, c); err != nil {
		return err
	}
	st.APIRestart.Informers = s.informers()
	fmt.Fprintf(os.Stderr, "bench:   API server restarted (down %v): %v writes, %v LIST, %v watches that listed, in %v\n",
		st.APIRestart.Down.Round(100*time.Millisecond), st.APIRestart.Writes, st.APIRestart.Lists, st.APIRestart.WatchLists, apiRestartWatch)
	r.Steady = st
	return nil
}

// controllerKinds are what the controller writes. Not every write the
// API server counts: a restarted API server writes its own bootstrap
// objects (priority levels, RBAC defaults), and each scrape of the
// controller's metrics has it create a TokenReview and a
// SubjectAccessReview, which store nothing.
func controllerKinds(resource string) bool {
	switch resource {
	case "bars", "bars/status", "deployments", "events":
		return true
	}
	return false
}

// waitSyncedOnce waits until the controller's queue has taken at least
// n keys (every Bar is added by the initial list) and then drained: each
// Bar synced at least once.
func waitSyncedOnce(ctx context.Context, metricsURL, token string, n int) error {
	client := loopbackClient()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
		m, err := localcluster.Scrape(client, metricsURL, token)
		if err != nil {
			return false, err
		}
		adds, _ := m.Value("workqueue_adds_total", benchQueue)
		depth, _ := m.Value("workqueue_depth", benchQueue)
		busy, _ := m.Value("workqueue_unfinished_work_seconds", benchQueue)
		return adds >= float64(n) && depth == 0 && busy == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for every Bar to be synced once: %w", err)
	}
	return nil
}

// restartAPIServer kills kube-apiserver and starts it again on the same
// etcd, then counts what the controller asks of the new one while
// nothing changes: its watches resume (from the resourceVersion they
// had) or relist, and it should write nothing.
func restartAPIServer(ctx context.Context, c *localcluster.Cluster) (apiRestartResult, error) {
	var res apiRestartResult
	start := time.Now()
	if err := c.KillAndRestart(ctx, "kube-apiserver", 0); err != nil {
		return res, err
	}
	res.Down = time.Since(start)
	time.Sleep(apiRestartWatch)
	// The restarted server's counters started at zero.
	after, err := scrapeRequests(c)
	if err != nil {
		return res, err
	}
	ours := func(r string) bool { return r == "bars" || r == "deployments" }
	res.Writes = after.writes(controllerKinds)
	res.Lists, res.WatchLists = after.count("LIST", ours), after.count(watchList, ours)
	return res, nil
}
