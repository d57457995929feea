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

package model

import "fmt"

// The controller sets GOGC itself after every collection (internal/memory's
// gcTuner): the heap may grow by GCHeadroomPercent of the live heap, but
// by at least GCMinHeadroom, so a small controller runs at Go's own
// GOGC=100 and a large one at 20. Peak RSS and the collector's CPU follow
// GOGC, so a line in N fitted where GOGC is 100 cannot extrapolate to
// where it is 20; the model computes what the controller computes instead.
// The root package's gcmodel_test.go checks these against internal/memory.
const (
	// GCHeadroomPercent is --gc-headroom-percent's default (options.go).
	GCHeadroomPercent = 20
	// UnnamedHeadroom is what a report that does not name its
	// controller's --gc-headroom-percent ran at: the default until
	// 8036d92, before the bench wrote it into the report's header.
	UnnamedHeadroom = 50
	// GCMinHeadroom is internal/memory's MinHeadroom, in bytes.
	GCMinHeadroom = 32 << 20
)

// GCCollectorShare is the collector's share of the controller's CPU over
// a cold start at GOGC=100: 0.21, fitted to make bench-gc's cold starts
// at 50,000 Bars (the GC headroom part of docs/benchmarks-large.md: 59.0 s
// of CPU at GOGC=100, 68.4 at 50, 76.8 at 30, 81.0 at 20;
// FitCollectorShare, and TestCollectorShareIsTheGCBenchs holds this to
// the committed part; the part before gave 0.24), a little below the
// 22–30 % GODEBUG=gctrace=1 put on a 5,000-Bar run
// (docs/measurements/benchmarks-controller-cost-first-to-third-steps.md, "The
// controller's own cost, first steps").
const GCCollectorShare = 0.21

// GCPercent is the GOGC the controller runs at with the shipped defaults
// when a collection finds liveMiB live: internal/memory's GCPercent(live, 20,
// gcMinHeadroom), on the same whole bytes and with the same integer
// division. It is 100 up to 32 MiB live, 32 MiB over the live heap
// rounded up to a multiple of 10 % between 32 and about 160 MiB, and
// GCHeadroomPercent above.
func GCPercent(liveMiB float64) float64 {
	return GCPercentAt(liveMiB, GCHeadroomPercent)
}

// GCPercentAt is GCPercent for another --gc-headroom-percent; 0 leaves
// Go's GOGC=100, as internal/memory's SetUp does.
func GCPercentAt(liveMiB float64, headroom int) float64 {
	if headroom <= 0 {
		return 100
	}
	live := uint64(max(liveMiB, 0) * (1 << 20))
	p := headroom
	if live > 0 && GCMinHeadroom*100/live > uint64(p) {
		p = int(min(GCMinHeadroom*100/live, 1000))
	}
	p = (p + 9) / 10 * 10
	return float64(min(p, max(100, headroom)))
}

// HeapGoal is the most the heap reaches, in MiB, while a cold start's live
// heap grows to liveMiB: live × (1 + GCPercent/100) at liveMiB, or the goal
// just below the last step of GCPercent if that was higher. Each step down
// (from 90 to 80 % at 40 MiB, say) lowers the goal by a tenth of the live
// heap, but the cold start passed through the heap just below it, so its
// peak did not drop; taking the higher keeps the peak monotone in N.
func HeapGoal(liveMiB float64) float64 { return HeapGoalAt(liveMiB, GCHeadroomPercent) }

// HeapGoalAt is HeapGoal for a controller run with another
// --gc-headroom-percent (0: Go's GOGC=100).
func HeapGoalAt(liveMiB float64, headroom int) float64 {
	p := GCPercentAt(liveMiB, headroom)
	goal := liveMiB * (1 + p/100)
	if p >= 100 || liveMiB <= 0 {
		return goal
	}
	// The largest live heap at which gcPercent's quotient is still above
	// p, so that it rounds up to the step above p: the end of that step.
	below := float64(uint64(GCMinHeadroom*100)/uint64(p+1)) / (1 << 20)
	return max(goal, below*(1+GCPercentAt(below, headroom)/100))
}

// GCCPUFactor is how much more CPU a cold start costs the controller at
// the GOGC it runs at with liveMiB live than at GOGC=100: the collector's
// share of it scales by coldStartMarking and the rest does not.
func GCCPUFactor(liveMiB float64) float64 { return GCCPUFactorAt(liveMiB, GCHeadroomPercent) }

// GCCPUFactorAt is GCCPUFactor for another --gc-headroom-percent.
func GCCPUFactorAt(liveMiB float64, headroom int) float64 {
	return gcFactor(GCPercentAt(liveMiB, headroom))
}

func gcFactor(gogc float64) float64 {
	return (1 - GCCollectorShare) + GCCollectorShare*coldStartMarking(gogc)
}

// coldStartMarking is what a cold start's collections mark at this GOGC,
// relative to GOGC=100. A collection marks the live heap; while a cold
// start's live heap grows, each collection comes when the heap has grown
// by g = GOGC/100 of the last one's live heap, so the live heaps marked
// form a geometric series up to the final one, L: L·(1+g)/g in all.
// At GOGC=100 that is 2L, at 20 it is 6L: three times as much.
func coldStartMarking(gogc float64) float64 {
	g := gogc / 100
	return (1 + g) / (2 * g)
}

// GCRun is one cold start of make bench-gc's table.
type GCRun struct {
	N        int
	Headroom int // --gc-headroom-percent; 0 is Go's GOGC=100
	LiveMiB  float64
	CPU      float64 // seconds
}

// FitCollectorShare fits GCCollectorShare's f to the runs of the largest
// size: each run's CPU over the one at Go's GOGC=100 is
// 1 + f·(coldStartMarking(GOGC) − 1), GOGC what the tuner sets at the
// run's live heap; least squares through the origin.
func FitCollectorShare(runs []GCRun) (f float64, n int, err error) {
	for _, r := range runs {
		n = max(n, r.N)
	}
	base := 0.0
	for _, r := range runs {
		if r.N == n && r.Headroom == 0 {
			base = r.CPU
		}
	}
	if base <= 0 {
		return 0, n, fmt.Errorf("no run at Go's GOGC=100 at %d Bars", n)
	}
	var sxy, sxx float64
	for _, r := range runs {
		if r.N != n || r.Headroom == 0 {
			continue
		}
		x := coldStartMarking(GCPercentAt(r.LiveMiB, r.Headroom)) - 1
		sxy += x * (r.CPU/base - 1)
		sxx += x * x
	}
	if sxx == 0 {
		return 0, n, fmt.Errorf("no run below GOGC=100 at %d Bars", n)
	}
	return sxy / sxx, n, nil
}
