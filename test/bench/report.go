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
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ratio is the median controller run over the median floor.
// controllerInformers is how many informers bar-controller starts: Bars,
// the Deployments it manages, and every Deployment's metadata (main.go).
const controllerInformers = 3

func ratio(r result) float64 { return median(r.Controllers).Seconds() / median(r.Floors).Seconds() }

// serverRatio is the same for the API server's and etcd's CPU.
func serverRatio(r result) float64 {
	return median(r.ControllerServerCPU).Seconds() / median(r.FloorServerCPU).Seconds()
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is "min–max (median m)", or the one value.
func spread(ds []time.Duration) string {
	if len(ds) == 1 {
		return secs(ds[0])
	}
	return fmt.Sprintf("%.1f–%.1f s (median %.1f)", slices.Min(ds).Seconds(), slices.Max(ds).Seconds(), median(ds).Seconds())
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func markdownTable(rs []result) string {
	var b strings.Builder
	b.WriteString("| Bars | unrelated Deployments | floor: min–max (median) | controller runs | median ÷ median floor | Events all written, after convergence | writes per Bar: Deployment + status + event (+ other) | idle writes (restart, 2 resyncs) | LIST / WATCH (that listed) | peak RSS | live heap | CPU | API server + etcd CPU: floors, controller runs (medians ÷) | the bench's own CPU: floors, controller runs |\n")
	b.WriteString("| ---: | ---: | --- | --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |\n")
	for _, r := range rs {
		runs := make([]string, len(r.Controllers))
		for i, d := range r.Controllers {
			runs[i] = secs(d)
		}
		events := make([]string, len(r.EventsAfter))
		for i, d := range r.EventsAfter {
			events[i] = secs(d)
		}
		if r.EventsMissing > 0 {
			events = append(events, fmt.Sprintf("**%v missing**", r.EventsMissing))
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %.2f× | %s | %.2f = %.2f + %.2f + %.2f (+ %.2f) | %s, %s | %s / %s (%s) | %.1f MB | %.1f MB | %.1f s | %s; %s (%.2f×) | %s; %s |\n",
			r.N, r.Unrelated, spread(r.Floors), strings.Join(runs, ", "), ratio(r), strings.Join(events, ", "),
			r.DeploymentWrites+r.StatusWrites+r.EventWrites+r.OtherWrites, r.DeploymentWrites, r.StatusWrites, r.EventWrites, r.OtherWrites,
			trimFloat(r.RestartWrites), trimFloat(r.IdleWrites), trimFloat(r.Lists), trimFloat(r.Watches), trimFloat(r.WatchLists), mb(r.PeakRSS), mb(r.Heap.Live), r.CPU.Seconds(),
			spread(r.FloorServerCPU), spread(r.ControllerServerCPU), serverRatio(r), spread(r.FloorBenchCPU), spread(r.ControllerBenchCPU))
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
	for _, r := range rs {
		// Below 2,000 Bars a run is a few seconds, start-up and the last
		// rollouts weigh more than the throughput: no target there.
		if r.Unrelated == 0 && r.N >= 2000 {
			out = append(out, fmt.Sprintf("converge within 1.5× the floor at %d Bars (medians): %.2f× — %s", r.N, ratio(r), mark(ratio(r) <= 1.5)))
		}
	}
	if plain != nil {
		w := plain.DeploymentWrites + plain.StatusWrites + plain.EventWrites + plain.OtherWrites
		out = append(out, fmt.Sprintf("at most 3 writes per Bar, its event included: %.2f — %s", w, mark(w <= 3)))
	}
	// Linear: the time per Bar at the largest size within 20 % of that at
	// 5,000 (or the smallest size above it).
	var from *result
	for i := range rs {
		if r := &rs[i]; hi != nil && r.Unrelated == 0 && r.N >= 5000 && r.N < hi.N && (from == nil || r.N < from.N) {
			from = r
		}
	}
	if from != nil {
		a := median(from.Controllers).Seconds() / float64(from.N) * 1000
		b := median(hi.Controllers).Seconds() / float64(hi.N) * 1000
		out = append(out, fmt.Sprintf("converge time per Bar linear from %d to %d Bars (within 20 %%): %.2f s → %.2f s per 1,000 Bars, %+.0f %% — %s",
			from.N, hi.N, a, b, (b/a-1)*100, mark(b <= 1.2*a)))
	}
	var lists, listed []string
	once := true
	for _, r := range rs {
		lists, listed = append(lists, trimFloat(r.Lists)), append(listed, trimFloat(r.WatchLists))
		once = once && r.Lists == 0 && r.WatchLists == controllerInformers
	}
	out = append(out, fmt.Sprintf("one list per informer (%d, each by WatchList) and no relist, every scenario: LIST %s, watches that listed %s — %s",
		controllerInformers, strings.Join(lists, ", "), strings.Join(listed, ", "), mark(once)))
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

func report(rs []result, failed []string, apf *apfResult, table, plotFile, build string, at, inflight, runs int, idleResync time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# Benchmarks

Written by `+"`make bench`"+` (test/bench) on %s, %s, %s, %d CPUs:
etcd and kube-apiserver from bin/k8s-<version>/ on this machine, no
kube-controller-manager, a fresh control plane per row. bar-controller runs
as in a cluster: under the shipped ServiceAccount and RBAC
(artifacts/install, a TokenRequest token), so API Priority and Fairness
puts its requests in the workload-low priority level, and with its shipped
default flags (only its listen addresses and kubeconfig are set, and
`+"`--profiling`"+` for the live heap below).

- **floor**: with no controller, a bare client (the admin, exempt from API
  Priority and Fairness, no rate limit, %s) creates each Bar, creates its
  Deployment and writes its status — the three writes an ideal controller
  with zero overhead would cost. Measured %d times per row, interleaved
  with the controller runs (floor, run, floor, ...), each in a namespace
  of its own, emptied after it.
- **warm-up**: before a row's first floor, 300 Bars as a floor writes them,
  then a cold start of each controller the row measures over 300 Bars of
  its own, unmeasured: what a fresh API server does once for a path, the
  floor's or a controller's, no timed step pays. Again after the steady
  step below, which ends with the API server restarted.
- **controller runs**: %d per row, each a fresh controller and namespace:
  the same Bar creates, then until every Bar's Deployment is as desired
  and its status.observedGeneration current. The ratio is the median run
  over the median floor.
- **Events all written**: how long after convergence the API server had
  received the run's last Event (one per Bar; the recorder writes them
  after the syncs, in the slots they share with them).
- **writes** are the API server's own counts (apiserver_request_total) over
  each controller run until all its Events were written, per Bar (mean of
  the runs), the bench's Bar creates taken out.
- **idle writes**: another controller, started with a %s resync period over
  the last run's converged Bars: writes in its first 2 s (the relist), then
  over two resync periods.
- **LIST / WATCH**: requests for Bars and Deployments from the last run's
  controller's start until it stopped, the bench's own watches taken out.
  With WatchList an informer's initial list is a WATCH that begins with
  the list: **that listed** counts those (the API server's
  apiserver_watch_list_duration_seconds); the other WATCHes resumed from a
  resourceVersion after the API server ended a watch at its timeout
  (5–10 minutes).
- **peak RSS**: the largest VmHWM of the runs' controllers; **CPU**: their
  mean user + system time.
- **live heap**: once converged (and the peak read) and idle (its work
  queue empty: the Deployments it created come back as watch events and
  sync their Bars once more, writing nothing), the bytes of live objects
  right after a collection (the runtime's HeapAlloc, which the text heap
  profile prints after its collection; the profile's own total, one
  sample per 512 KB, is an estimate): what its caches and event series
  hold. For this the controller runs with `+"`--profiling`"+`, which only
  adds /debug/pprof/ to its metrics endpoint; its heap profile names the
  holders below.
  With Go's default GOGC=100 the heap grows to about twice what is live
  between collections, which peak RSS includes.
- **API server + etcd CPU**: what kube-apiserver and etcd spent over each
  floor and each controller run (user + system). The ratio of their
  medians is the work a controller run asks of the API server, per unit
  of the floor's; on 2 cores shared with the controller itself, the
  converge ratio cannot drop far below it.
- **the bench's own CPU**: what this process spent over each floor (its
  writes) and each controller run (its Bar creates and its watch of Bars
  and Deployments, which counts the Bars done as events come rather than
  walking them all at every poll): it runs on the same two cores.

Seconds on a shared 2-core machine vary between runs, the floor's too:
the spread of the floors in each row says by how much, and a ratio is no
steadier than the floor it divides by.

%s
![converge time against the floor](%s)

## Targets

`, time.Now().UTC().Format("2006-01-02 15:04 MST"), build, runtime.Version(), runtime.NumCPU(),
		fmt.Sprintf("%d requests in flight", inflight), runs+1, runs, idleResync, table, plotFile)
	for _, t := range targets(rs, at) {
		fmt.Fprintf(&b, "- %s\n", t)
	}
	for _, f := range failed {
		fmt.Fprintf(&b, "- %s — **not measured**\n", f)
	}
	for _, r := range rs {
		if r.FloorRetries > 0 {
			fmt.Fprintf(&b, "- note: at %d Bars the floors did %d requests again after the API server timed them out or lost the connection; their times include the wait\n", r.N, r.FloorRetries)
		}
	}
	if apf != nil {
		fmt.Fprintf(&b, "- %s\n", apfTarget(*apf))
		fmt.Fprintf(&b, `
## Where API Priority and Fairness rejects the controller

A control plane of its own with 45 seats in all (`+"`--max-requests-inflight=30 --max-mutating-requests-inflight=15`"+`),
where the controller's ServiceAccount is alone in a priority level of
the smallest share, one seat, that rejects instead of queueing (as in
test/faults' TestPriorityAndFairnessRejects): from its second request in
flight on, the API server answers 429. The shipped controller and one
with the fixed 4 workers it had before the adaptive limit take turns, %d
runs each, each over %d new Bars; converge time from the first create.

%s`, len(apf.Runs[apfVariants[0].name]), apf.N, apfTable(*apf))
	}
	b.WriteString("\nWhat the numbers mean, and why a target is missed where it is: [measurements.md](measurements.md#benchmarks).\n\n## Writes in detail\n\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "- %d Bars, %d unrelated: %s\n", r.N, r.Unrelated, r.WritesDetail)
	}
	b.WriteString("\n## Live heap in detail\n\nThe functions that allocated the most of the live heap (the leaf of each\nallocation's stack below the runtime):\n\n")
	for _, r := range rs {
		after := make([]string, len(r.QueueEmptyAfter))
		for i, d := range r.QueueEmptyAfter {
			after[i] = secs(d)
		}
		fmt.Fprintf(&b, "- %d Bars, %d unrelated: %.1f MB (work queue empty %s after convergence): %s\n", r.N, r.Unrelated, mb(r.Heap.Live), strings.Join(after, ", "), r.Heap.describe())
	}
	return b.String()
}

func writePlot(path string, rs []result) error {
	p := plot.New()
	p.Title.Text = "Bars converged: bar-controller against the floor"
	p.X.Label.Text = "Bars"
	p.Y.Label.Text = "seconds from the first create (median)"
	var floor, ctl plotter.XYs
	for _, r := range rs {
		if r.Unrelated != 0 {
			continue
		}
		floor = append(floor, plotter.XY{X: float64(r.N), Y: median(r.Floors).Seconds()})
		ctl = append(ctl, plotter.XY{X: float64(r.N), Y: median(r.Controllers).Seconds()})
	}
	if err := plotutil.AddLinePoints(p, "floor (3 writes per Bar, bare client)", floor, "bar-controller (default flags)", ctl); err != nil {
		return err
	}
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, path)
}

// buildLine names what a report measured: the commit, and the
// --gc-headroom-percent the controller ran with, which shapes its peak
// RSS and CPU past 32 MiB live (test/bench/model reads it back; a report
// without it was measured at 50, the default until 8036d92).
func buildLine(controller string, extra []string) (string, error) {
	h := -1
	for i, a := range extra {
		name, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "gc-headroom-percent" {
			continue
		}
		if !ok && i+1 < len(extra) {
			v = extra[i+1] // the flag package's "--flag value" form
		}
		if _, err := fmt.Sscanf(v, "%d", &h); err != nil {
			return "", fmt.Errorf("--controller-args: %q: %w", a, err)
		}
	}
	if h < 0 {
		var err error
		if h, err = shippedHeadroom(controller); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("commit %s, controller --gc-headroom-percent=%d", describe(), h), nil
}

// describe is the commit measured, "-dirty" if the tree differs from it.
func describe() string {
	commit, _ := exec.Command("git", "describe", "--always", "--dirty").Output()
	return strings.TrimSpace(string(commit))
}
