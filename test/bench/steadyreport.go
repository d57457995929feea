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
	"strings"
	"time"
)

// churnLatencyTarget is issue 43's: p99 of spec change → Deployment
// written under 1 s at 20 changes a second (with 50,000 Bars present,
// make bench-large; make bench reports the same at its size).
const (
	churnLatencyTarget = time.Second
	churnTargetRate    = 20
)

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func (d distribution) String() string {
	if d.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%s / %s / %s / %s", ms(d.P50), ms(d.P90), ms(d.P99), ms(d.Max))
}

// steadySection is the report's part on the steady step, for the rows
// that had one; empty if none did.
func steadySection(rs []result, churnFor time.Duration) string {
	var b strings.Builder
	for _, r := range rs {
		if r.Steady == nil {
			continue
		}
		steadyPart(&b, r, "bar-controller", churnFor)
		if r.Peer != nil && r.Peer.Steady != nil {
			steadyPart(&b, *r.Peer, "the controller-runtime peer", churnFor)
		}
	}
	return b.String()
}

// steadyPart is one controller's steady step in the report.
func steadyPart(b *strings.Builder, r result, who string, churnFor time.Duration) {
	st := r.Steady
	fmt.Fprintf(b, `
## Steady state at %d Bars: %s

After the row's last controller run and idle check, with its %d Bars
converged (test/bench/steady.go):

- **restart**: a controller with the shipped defaults started over them,
  as a rollout or a crash starts one; ready is /readyz (caches synced),
  every Bar synced once is its work queue drained after taking at least
  one key per Bar.
- **churn**: then, for %s per phase, the bench changes R Bars a second,
  each a new image tag and replica count (round-robin over the Bars in a
  random order, so no Bar changes twice within N/R seconds), or deletes R
  Deployments a second; its own watch times each change from the
  request's sending to the Deployment written as asked (for a delete: a
  Deployment of that name with a new UID), and from that to the Bar's
  status observing the change's generation. p50 / p90 / p99 / max; the
  work queue's own wait (p99 of workqueue_queue_duration_seconds over the
  phase) and its deepest sampled depth (every %s).
- **API server restart**: kube-apiserver killed and started again on the
  same etcd under the running controller, every watch broken; what the
  controller asked of the new one in its first %s.

| restart: ready | every Bar synced once | writes | peak RSS (converged run's) | API server + etcd CPU | LIST / WATCH that listed |
| ---: | ---: | ---: | --- | ---: | --- |
| %s | %s | %s | %.1f MB (%.1f MB) | %s | %s / %s |
`, r.N, who, r.N, churnFor, churnSample, apiRestartWatch,
		secs(st.Restart.Ready), secs(st.Restart.SyncedOnce), trimFloat(st.Restart.Writes), mb(st.Restart.PeakRSS), mb(st.Restart.ConvergedRSS),
		secs(st.Restart.ServerCPU), trimFloat(st.Restart.Lists), trimFloat(st.Restart.WatchLists))
	if p, q := st.Restart.Peak, st.Restart.ConvergedPeak; p.RSS > 0 && q.RSS > 0 {
		fmt.Fprintf(b, "\nWhat each peak was made of, at its highest RSS sampled every %v from the controller's own metrics (test/bench/peakmemory.go), the restart's / the converged run's: RSS %s; live then (the heap goal over 1 + GOGC/100) %s; heap goal %s (GOGC %.0f / %.0f); heap in use %s; freed, not yet returned to the OS %s; runtime %s; other %s.\n",
			peakSampleInterval, mbPair(p.RSS, q.RSS), mbPair(p.LiveAtPeak(), q.LiveAtPeak()), mbPair(p.HeapGoal, q.HeapGoal), p.GOGC, q.GOGC,
			mbPair(p.HeapInuse, q.HeapInuse), mbPair(p.Retained, q.Retained), mbPair(p.Runtime, q.Runtime), mbPair(p.Outside(), q.Outside()))
	}
	b.WriteString("\n| churn | changes | missed | change → Deployment written | Deployment → status current | queue wait p99 | deepest queue |\n| --- | ---: | ---: | --- | --- | ---: | ---: |\n")
	for _, c := range st.Churn {
		what := fmt.Sprintf("spec, %d Bars/s", c.Rate)
		if c.Phase == "recreate" {
			what = fmt.Sprintf("Deployment deleted, %d/s", c.Rate)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s |\n", what, c.Changes, c.Missed, c.ToDeployment, c.ToStatus, ms(c.QueueWait), trimFloat(c.MaxDepth))
	}
	a := st.APIRestart
	fmt.Fprintf(b, "\nAPI server restart (down %s): %s writes, %s LIST and %s watches that listed of Bars and Deployments in %s.\n\n",
		secs(a.Down), trimFloat(a.Writes), trimFloat(a.Lists), trimFloat(a.WatchLists), apiRestartWatch)
	for _, t := range steadyTargets(r) {
		fmt.Fprintf(b, "- %s\n", t)
	}
}

// steadyTargets checks a row's steady step against issue 43's targets.
func steadyTargets(r result) []string {
	st := r.Steady
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	var out []string
	for _, c := range st.Churn {
		if c.Phase == "spec" && c.Rate == churnTargetRate {
			out = append(out, fmt.Sprintf("spec change → Deployment written, p99 under %s at %d Bars/s with %d Bars: %s, %d of %d missed — %s",
				ms(churnLatencyTarget), c.Rate, r.N, ms(c.ToDeployment.P99), c.Missed, c.Changes, mark(c.ToDeployment.P99 < churnLatencyTarget && c.Missed == 0)))
		}
	}
	out = append(out,
		fmt.Sprintf("a restart over %d converged Bars writes nothing: %s — %s", r.N, trimFloat(st.Restart.Writes), mark(st.Restart.Writes == 0)),
		fmt.Sprintf("its peak RSS no higher than the converged controller's: %.1f MB against %.1f MB — %s",
			mb(st.Restart.PeakRSS), mb(st.Restart.ConvergedRSS), mark(st.Restart.PeakRSS <= st.Restart.ConvergedRSS)),
		fmt.Sprintf("an API server restart under it: no writes and no relist storm (at most one list per informer, %d): %s writes, %s LIST, %s watches that listed — %s",
			st.APIRestart.Informers, trimFloat(st.APIRestart.Writes), trimFloat(st.APIRestart.Lists), trimFloat(st.APIRestart.WatchLists),
			mark(st.APIRestart.Writes == 0 && st.APIRestart.Lists+st.APIRestart.WatchLists <= float64(st.APIRestart.Informers))))
	return out
}
