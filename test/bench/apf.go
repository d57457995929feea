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
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// The other world a fixed number of workers is wrong in: the API server
// rejects the controller. As in test/faults, the controller's
// ServiceAccount is put alone in a priority level of one seat that
// rejects instead of queueing; the controller as it ships (the adaptive
// limit) and the fixed 4 workers it had before take turns on the same API
// server, each over the same Bar creates. The converge time of the fixed
// 4 is the reference: the adaptive limit must be no worse.

const starvedLevel = "bar-bench-starved"

// apfVariant is one way of running the controller under the starved level.
type apfVariant struct {
	name string
	args []string
}

var apfVariants = []apfVariant{
	{name: "fixed: --adaptive-concurrency=false --workers=4", args: []string{"--adaptive-concurrency=false", "--workers=4"}},
	{name: "adaptive (shipped defaults)"},
}

// apfRun is what one controller run under the starved level measured.
type apfRun struct {
	took       time.Duration
	rejected   float64 // 429s the controller was answered
	requests   float64 // all its requests
	syncErrors float64 // syncs that failed (a sync that waited out Retry-Afters past its timeout is one)
}

// apfResult holds, per variant, its runs.
type apfResult struct {
	N    int
	Runs map[string][]apfRun
}

func (s scenario) apf(ctx context.Context, n int) (r apfResult, err error) {
	r.N, r.Runs = n, map[string][]apfRun{}
	dir, err := os.MkdirTemp("", "bar-bench-apf-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return r, err
	}
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: s.binDir, Dir: dir, CRDs: []string{s.crdDir},
		APIServerFlags: localcluster.StarvedAPIServerFlags})
	if err != nil {
		return r, err
	}
	defer c.Stop()
	kubeconfig := filepath.Join(dir, "controller.kubeconfig")
	if _, err := c.InstallServiceAccount(ctx, root, kubeconfig, 3*time.Hour); err != nil {
		return r, fmt.Errorf("the controller's ServiceAccount: %w", err)
	}
	if err := c.StarveController(ctx, starvedLevel); err != nil {
		return r, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	w := writers{kube: kubernetes.NewForConfigOrDie(cfg), bars: clientset.NewForConfigOrDie(cfg)}
	for i := range s.rounds {
		for j, v := range apfVariants {
			run, err := s.apfRun(ctx, c, w, kubeconfig, v, fmt.Sprintf("apf-%d-%d", i, j), n)
			if err != nil {
				return r, fmt.Errorf("%s: %w", v.name, err)
			}
			r.Runs[v.name] = append(r.Runs[v.name], run)
			fmt.Fprintf(os.Stderr, "bench:   APF, %s: converged in %v, %v of %v requests rejected, %v sync errors\n",
				v.name, run.took.Round(100*time.Millisecond), run.rejected, run.requests, run.syncErrors)
		}
	}
	return r, nil
}

func (s scenario) apfRun(ctx context.Context, c *localcluster.Cluster, w writers, kubeconfig string, v apfVariant, ns string, n int) (apfRun, error) {
	var run apfRun
	if err := createNamespace(ctx, w.kube, ns); err != nil {
		return run, err
	}
	ctl, metricsAddr, err := s.startController(kubeconfig, ns, v.args...)
	if err != nil {
		return run, err
	}
	defer ctl.Stop(30 * time.Second)
	watcher, err := watchConvergence(ctx, c.Config, ns)
	if err != nil {
		return run, err
	}
	defer watcher.stop()
	start := time.Now()
	if err := createBars(ctx, w.bars, ns, n, s.inflight); err != nil {
		return run, err
	}
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, 10*time.Minute, true, func(context.Context) (bool, error) {
		return watcher.converged() == n, nil
	}); err != nil {
		return run, fmt.Errorf("waiting for %d Bars to converge (%d did): %w", n, watcher.converged(), err)
	}
	run.took = time.Since(start)
	// The Events are written after the syncs, in the same seat: let them
	// finish before counting, so that both variants are counted whole.
	time.Sleep(5 * time.Second)
	client := loopbackClient()
	m, err := localcluster.Scrape(client, "https://"+metricsAddr+"/metrics", c.Config.BearerToken)
	if err != nil {
		return run, err
	}
	run.rejected, _ = m.Value("rest_client_requests_total", map[string]string{"code": "429"})
	run.requests, _ = m.Value("rest_client_requests_total", nil)
	run.syncErrors, _ = m.Value("bar_controller_syncs_total", map[string]string{"result": "error"})
	watcher.stop()
	ctl.Stop(30 * time.Second)
	return run, clean(ctx, w.kube, w.bars, ns)
}

// apfTable is the section of the report for the starved level.
func apfTable(r apfResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %d Bars, one seat, rejecting | converge time, each run | median | 429s / requests, each run | sync errors |\n| --- | --- | ---: | --- | --- |\n", r.N)
	for _, v := range apfVariants {
		runs := r.Runs[v.name]
		var took []time.Duration
		var times, rejections, errs []string
		for _, run := range runs {
			took = append(took, run.took)
			times = append(times, fmt.Sprintf("%.1f s", run.took.Seconds()))
			rejections = append(rejections, fmt.Sprintf("%.0f / %.0f", run.rejected, run.requests))
			errs = append(errs, fmt.Sprintf("%.0f", run.syncErrors))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %s | %s |\n", v.name, strings.Join(times, ", "), median(took).Seconds(),
			strings.Join(rejections, ", "), strings.Join(errs, ", "))
	}
	return b.String()
}

// apfTarget says whether the adaptive limit converged no slower than the
// fixed 4 (medians; a tenth of slack, within the spread of repeated runs)
// and without a failed sync.
func apfTarget(r apfResult) string {
	fixed, adaptive := r.Runs[apfVariants[0].name], r.Runs[apfVariants[1].name]
	var ft, at []time.Duration
	errs := 0.0
	for _, run := range fixed {
		ft = append(ft, run.took)
	}
	for _, run := range adaptive {
		at = append(at, run.took)
		errs += run.syncErrors
	}
	ratio := median(at).Seconds() / median(ft).Seconds()
	verdict := "met"
	if ratio > 1.1 || errs > 0 {
		verdict = "**missed**"
	}
	return fmt.Sprintf("under a one-seat priority level (%d Bars), the adaptive limit no slower than 4 fixed workers and no failed sync: %.2f× their median, %.0f sync errors — %s",
		r.N, ratio, errs, verdict)
}
