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
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The cold-start memory peak against --gc-headroom-percent: per size, on
// one control plane, a floor and then one cold start per value, each in a
// namespace of its own, emptied after it. A cold start's garbage is every
// decoded watch event and answer, so its peak is the live heap plus the
// headroom the collector allows (internal/memory); what a lower headroom
// costs is collector CPU, which the converge time and CPU columns show.

const (
	gcBegin = "<!-- GC headroom part: written by `make bench-gc` (bin/bench --gc-headroom); do not edit by hand. -->"
	gcEnd   = "<!-- End of the GC headroom part. -->"
)

// issue 43's targets: a cold start's peak RSS at most 1.3 times the
// converged live heap, and at most 9 MB per 1,000 Bars at 50,000.
const (
	gcPeakOverLive = 1.3
	gcMBPer1000    = 9.0
	gcPerBarAt     = 50000
)

type gcRun struct {
	Headroom      int // --gc-headroom-percent; 0 leaves Go's GOGC=100
	Converge      time.Duration
	PeakRSS, Live int64
	CPU           time.Duration
	Peak          peakMemory
}

type gcResult struct {
	N     int
	Floor time.Duration
	Runs  []gcRun
}

// gcHeadroom measures one size.
func (s scenario) gcHeadroom(ctx context.Context, n int, values []int) (res gcResult, err error) {
	res.N = n
	row, err := s.newRow(ctx, fmt.Sprintf("gc-%d", n), nil)
	if err != nil {
		return res, err
	}
	defer row.close()
	if err := s.warmUp(ctx, row, true); err != nil {
		return res, err
	}
	var retries int
	var self time.Duration
	if res.Floor, _, err = s.floor(ctx, row.c, row.w, "floor-gc", n, &retries, &self, ""); err != nil {
		return res, fmt.Errorf("floor: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bench:   floor: %v\n", res.Floor.Round(100*time.Millisecond))
	for i, v := range values {
		vs := s
		vs.coldOnly, vs.samplePeak, vs.rounds = true, true, 1
		vs.extraArgs = append(slices.Clone(s.extraArgs), fmt.Sprintf("--gc-headroom-percent=%d", v))
		r := result{N: n}
		if err := vs.controllerRun(ctx, row.c, row.w, row.kubeconfig, &r, i); err != nil {
			return res, fmt.Errorf("--gc-headroom-percent=%d: %w", v, err)
		}
		run := gcRun{Headroom: v, Converge: r.Controllers[0], PeakRSS: r.PeakRSS, Live: r.Heap.Live, CPU: r.CPU, Peak: r.Peak}
		fmt.Fprintf(os.Stderr, "bench:   --gc-headroom-percent=%d: converged in %v, peak RSS %.1f MB, live heap %.1f MB, CPU %v; at the peak: %+v\n",
			v, run.Converge.Round(100*time.Millisecond), mb(run.PeakRSS), mb(run.Live), run.CPU.Round(100*time.Millisecond), run.Peak)
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

// shippedHeadroom is the controller's default --gc-headroom-percent, as
// its --help prints it: the binary is the one source of it.
func shippedHeadroom(controller string) (int, error) {
	out, _ := exec.Command(controller, "--help").CombinedOutput() // exits 0 or 2 by flag package; the text is what matters
	for line := range strings.SplitSeq(string(out), "\n") {
		if !strings.Contains(line, "-gc-headroom-percent") {
			continue
		}
		// The usage is on the next lines; the default ends the block,
		// so search from here.
		rest := string(out)[strings.Index(string(out), line):]
		var v int
		if i := strings.Index(rest, "(default "); i >= 0 {
			if _, err := fmt.Sscanf(rest[i:], "(default %d)", &v); err == nil {
				return v, nil
			}
		}
	}
	return 0, fmt.Errorf("%s --help names no default --gc-headroom-percent", controller)
}

func headroomName(v int) string {
	if v == 0 {
		return "0 (Go's GOGC=100)"
	}
	return fmt.Sprint(v)
}

// gcSection is the report's GC headroom part, with both markers.
func gcSection(rs []gcResult, shipped int, commit string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `%s

## A cold start's memory peak and --gc-headroom-percent

Written by `+"`make bench-gc`"+` on %s, commit %s, %s, %d CPUs. Per size, one
control plane: a floor, then one cold start of the controller per value
of --gc-headroom-percent (the shipped default is %d), each over the same
number of new Bars in a namespace of its own, emptied after it. Peak RSS
is the process's VmHWM once converged; live heap is what the next
collection found live once the queue was empty (as in the main table).

| Bars | --gc-headroom-percent | converge (÷ floor) | peak RSS | live heap | peak ÷ live | peak RSS per 1,000 Bars | CPU |
| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |
`, gcBegin, time.Now().UTC().Format("2006-01-02 15:04 MST"), commit, runtime.Version(), runtime.NumCPU(), shipped)
	for _, r := range rs {
		for _, run := range r.Runs {
			fmt.Fprintf(&b, "| %d | %s | %s (%.2f×) | %.1f MB | %.1f MB | %.2f | %.1f MB | %.1f s |\n", r.N, headroomName(run.Headroom),
				secs(run.Converge), run.Converge.Seconds()/r.Floor.Seconds(), mb(run.PeakRSS), mb(run.Live),
				float64(run.PeakRSS)/float64(run.Live), mb(run.PeakRSS)/float64(r.N)*1000, run.CPU.Seconds())
		}
	}
	b.WriteString(peakTable(rs))
	b.WriteString("\n")
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	for _, r := range rs {
		for _, run := range r.Runs {
			if run.Headroom != shipped {
				continue
			}
			ratio := float64(run.PeakRSS) / float64(run.Live)
			fmt.Fprintf(&b, "- %d Bars, the shipped %d: peak RSS at most %.1f× the live heap: %.2f× — %s", r.N, shipped, gcPeakOverLive, ratio, mark(ratio <= gcPeakOverLive))
			if live := run.Peak.LiveAtPeak(); live > 0 {
				fmt.Fprintf(&b, " (at the peak %.2f× the converged live heap was live, and the heap goal was %.2f×)", live/float64(run.Live), run.Peak.HeapGoal/float64(run.Live))
			}
			b.WriteString("\n")
			if r.N == gcPerBarAt {
				per := mb(run.PeakRSS) / float64(r.N) * 1000
				fmt.Fprintf(&b, "- %d Bars, the shipped %d: peak RSS at most %.0f MB per 1,000 Bars: %.1f MB — %s\n", r.N, shipped, gcMBPer1000, per, mark(per <= gcMBPer1000))
			}
		}
	}
	b.WriteString("\n" + gcEnd + "\n")
	return b.String()
}

// peakTable is what each cold start's peak was made of (peakmemory.go).
// Its point is the column "live then": if the peak held more live data
// than the converged controller does, no headroom brings the peak down
// to a multiple of the converged live heap.
func peakTable(rs []gcResult) string {
	sampled := false
	for _, r := range rs {
		for _, run := range r.Runs {
			sampled = sampled || run.Peak.RSS > 0
		}
	}
	if !sampled {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `
What the peak was made of: the controller's own metrics (client_golang's
Go collector, from runtime/metrics), scraped every %v over each cold
start, at the scrape of the highest RSS. **Live then** is the heap goal
over 1 + GOGC/100: what the collection before the peak found live. **Free,
kept** is heap the collector freed and the scavenger has not yet returned
to the OS; **runtime** is stacks, span structures and the collector's
metadata; **other** is the rest of RSS (the binary, C and kernel side).

| Bars | --gc-headroom-percent | RSS at the scrape | heap in use | heap goal (GOGC) | live then | converged live | free, kept | runtime | other |
| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |
`, peakSampleInterval)
	for _, r := range rs {
		for _, run := range r.Runs {
			p := run.Peak
			if p.RSS == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %d | %s | %.1f MB | %.1f MB | %.1f MB (%.0f) | %.1f MB | %.1f MB | %.1f MB | %.1f MB | %.1f MB |\n", r.N, headroomName(run.Headroom),
				mbf(p.RSS), mbf(p.HeapInuse), mbf(p.HeapGoal), p.GOGC, mbf(p.LiveAtPeak()), mb(run.Live), mbf(p.Retained), mbf(p.Runtime), mbf(p.Outside()))
		}
	}
	return b.String()
}
