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
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func ratio(r result) float64 { return r.Controller.Seconds() / r.Floor.Seconds() }

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func markdownTable(rs []result) string {
	var b strings.Builder
	b.WriteString("| Bars | unrelated Deployments | floor | controller | ÷ floor | writes per Bar: Deployment + status + event (+ other) | idle writes (restart, 2 resyncs) | LIST / WATCH | peak RSS | live heap | CPU | API server + etcd CPU: floor, controller run (÷) |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | --- |\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %.2f× | %.2f = %.2f + %.2f + %.2f (+ %.2f) | %s, %s | %s / %s | %.1f MB | %.1f MB | %.1f s | %s, %s (%.2f×) |\n",
			r.N, r.Unrelated, secs(r.Floor), secs(r.Controller), ratio(r),
			r.DeploymentWrites+r.StatusWrites+r.EventWrites+r.OtherWrites, r.DeploymentWrites, r.StatusWrites, r.EventWrites, r.OtherWrites,
			trimFloat(r.RestartWrites), trimFloat(r.IdleWrites), trimFloat(r.Lists), trimFloat(r.Watches), mb(r.PeakRSS), mb(r.Heap.Live), r.CPU.Seconds(),
			secs(r.FloorServerCPU), secs(r.ControllerServerCPU), r.ControllerServerCPU.Seconds()/r.FloorServerCPU.Seconds())
	}
	return b.String()
}

// targets checks the results against the goals of issue 10 and says, for
// each, what was measured.
func targets(rs []result, at int) []string {
	var plain, with *result
	var lo, hi *result
	for i := range rs {
		r := &rs[i]
		if r.Unrelated == 0 {
			if r.N == at {
				plain = r
			}
			if lo == nil || r.N < lo.N {
				lo = r
			}
			if hi == nil || r.N > hi.N {
				hi = r
			}
		} else if r.N == at {
			with = r
		}
	}
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	var out []string
	if plain != nil {
		w := plain.DeploymentWrites + plain.StatusWrites + plain.EventWrites + plain.OtherWrites
		out = append(out,
			fmt.Sprintf("converge within 1.5× the floor at %d Bars: %.2f× — %s", at, ratio(*plain), mark(ratio(*plain) <= 1.5)),
			fmt.Sprintf("at most 3 writes per Bar, its event included: %.2f — %s", w, mark(w <= 3)))
	}
	idle := 0.0
	for _, r := range rs {
		idle += r.IdleWrites + r.RestartWrites
	}
	out = append(out, fmt.Sprintf("no writes when idle (restart and resyncs, every scenario): %s — %s", trimFloat(idle), mark(idle == 0)))
	if plain != nil && with != nil {
		d := mb(with.PeakRSS - plain.PeakRSS)
		out = append(out, fmt.Sprintf("peak RSS grows by at most 5 MB with %d unrelated Deployments: %+.1f MB — %s", with.Unrelated, d, mark(d <= 5)))
	}
	if lo != nil && hi != nil && hi.N > lo.N {
		per := mb(hi.PeakRSS-lo.PeakRSS) / float64(hi.N-lo.N) * 1000
		live := mb(hi.Heap.Live-lo.Heap.Live) / float64(hi.N-lo.N) * 1000
		out = append(out, fmt.Sprintf("peak RSS grows by at most 10 MB per 1,000 Bars (%d → %d Bars): %.1f MB — %s (live heap: %.1f MB per 1,000 Bars)", lo.N, hi.N, per, mark(per <= 10), live))
	}
	return out
}

func report(rs []result, table, plotFile string, at, inflight int, idleResync time.Duration) string {
	commit, _ := exec.Command("git", "describe", "--always", "--dirty").Output()
	var b strings.Builder
	fmt.Fprintf(&b, `# Benchmarks

Written by `+"`make bench`"+` (test/bench) on %s, commit %s, %s, %d CPUs:
etcd and kube-apiserver from bin/k8s-<version>/ on this machine, no
kube-controller-manager, a fresh control plane per row. bar-controller runs
with its shipped default flags (only its listen addresses and kubeconfig
are set, and `+"`--profiling`"+` for the live heap below).

- **floor**: with no controller, a bare client (no rate limit, %s) creates
  each Bar, creates its Deployment and writes its status — the three writes
  an ideal controller with zero overhead would cost — after a warm-up of 300.
- **controller**: the same Bar creates, then until every Bar's Deployment
  is as desired and its status.observedGeneration current.
- **writes** are the API server's own counts (apiserver_request_total) over
  the controller run, per Bar, the bench's Bar creates taken out.
- **idle writes**: a second controller, started with a %s resync period over
  the converged Bars: writes in its first 2 s (the relist), then over two
  resync periods.
- **LIST / WATCH**: requests for Bars and Deployments from the controller's
  start to convergence (with WatchList, the initial list is a WATCH).
- **peak RSS**: the controller's VmHWM; **CPU**: its user + system time.
- **live heap**: once converged (and the peak read), the in-use bytes of
  the controller's heap profile taken right after a collection: what its
  caches and event series hold. For this the controller runs with
  `+"`--profiling`"+`, which only adds /debug/pprof/ to its metrics endpoint.
  With Go's default GOGC=100 the heap grows to about twice what is live
  between collections, which peak RSS includes.
- **API server + etcd CPU**: what kube-apiserver and etcd spent over the
  floor and over the controller run (user + system). Their ratio is the
  work the controller run asks of the API server, per unit of the
  floor's; on 2 cores shared with the controller itself, the converge
  ratio cannot drop far below it.

Absolute seconds on a shared 2-core machine vary by tens of percent between
runs; the ratio to the floor, measured minutes apart on the same API
server, much less.

%s
![converge time against the floor](%s)

## Targets

`, time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.TrimSpace(string(commit)), runtime.Version(), runtime.NumCPU(),
		fmt.Sprintf("%d requests in flight", inflight), idleResync, table, plotFile)
	for _, t := range targets(rs, at) {
		fmt.Fprintf(&b, "- %s\n", t)
	}
	b.WriteString("\nWhat the numbers mean, and why a target is missed where it is: [measurements.md](measurements.md#benchmarks).\n\n## Writes in detail\n\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "- %d Bars, %d unrelated: %s\n", r.N, r.Unrelated, r.WritesDetail)
	}
	b.WriteString("\n## Live heap in detail\n\nThe functions that allocated the most of the live heap (the leaf of each\nallocation's stack below the runtime):\n\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "- %d Bars, %d unrelated: %.1f MB: %s\n", r.N, r.Unrelated, mb(r.Heap.Live), r.Heap.describe())
	}
	return b.String()
}

func writePlot(path string, rs []result) error {
	p := plot.New()
	p.Title.Text = "Bars converged: bar-controller against the floor"
	p.X.Label.Text = "Bars"
	p.Y.Label.Text = "seconds from the first create"
	var floor, ctl plotter.XYs
	for _, r := range rs {
		if r.Unrelated != 0 {
			continue
		}
		floor = append(floor, plotter.XY{X: float64(r.N), Y: r.Floor.Seconds()})
		ctl = append(ctl, plotter.XY{X: float64(r.N), Y: r.Controller.Seconds()})
	}
	if err := plotutil.AddLinePoints(p, "floor (3 writes per Bar, bare client)", floor, "bar-controller (default flags)", ctl); err != nil {
		return err
	}
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, path)
}
