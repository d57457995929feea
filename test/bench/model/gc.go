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

// The controller sets GOGC itself after every collection (internal/memory's
// gcTuner): the heap may grow by GCHeadroomPercent of the live heap, but
// by at least GCMinHeadroom, so a small controller runs at Go's own
// GOGC=100 and a large one at 20. Peak RSS and the collector's CPU follow
// GOGC, so a line in N fitted where GOGC is 100 cannot extrapolate to
// where it is 50; the model computes what the controller computes instead.
// The root package's gcmodel_test.go checks these against internal/memory.
const (
	// GCHeadroomPercent is --gc-headroom-percent's default (options.go).
	GCHeadroomPercent = 20
	// GCMinHeadroom is internal/memory's MinHeadroom, in bytes.
	GCMinHeadroom = 32 << 20
)

// GCCollectorShare is the collector's share of the controller's CPU at
// GOGC=100: the midpoint of the 22–30 % GODEBUG=gctrace=1 measured over a
// 5,000-Bar bench run (docs/measurements.md, "The controller's own cost,
// first steps"). docs/sizing-model.md says what the check gives at both
// ends.
const GCCollectorShare = 0.26

// GCPercent is the GOGC the controller runs at with the shipped defaults
// when a collection finds liveMiB live: internal/memory's GCPercent(live, 20,
// gcMinHeadroom), on the same whole bytes and with the same integer
// division. It is 100 up to 32 MiB live, 32 MiB over the live heap
// rounded up to a multiple of 10 % between 32 and about 160 MiB, and
// GCHeadroomPercent above.
func GCPercent(liveMiB float64) float64 {
	live := uint64(max(liveMiB, 0) * (1 << 20))
	p := GCHeadroomPercent
	if live > 0 && GCMinHeadroom*100/live > uint64(p) {
		p = int(min(GCMinHeadroom*100/live, 1000))
	}
	p = (p + 9) / 10 * 10
	return float64(min(p, max(100, GCHeadroomPercent)))
}

// HeapGoal is the most the heap reaches, in MiB, while a cold start's live
// heap grows to liveMiB: live × (1 + GCPercent/100) at liveMiB, or the goal
// just below the last step of GCPercent if that was higher. Each step down
// (from 90 to 80 % at 40 MiB, say) lowers the goal by a tenth of the live
// heap, but the cold start passed through the heap just below it, so its
// peak did not drop; taking the higher keeps the peak monotone in N.
func HeapGoal(liveMiB float64) float64 {
	p := GCPercent(liveMiB)
	goal := liveMiB * (1 + p/100)
	if p >= 100 || liveMiB <= 0 {
		return goal
	}
	// The largest live heap at which gcPercent's quotient is still above
	// p, so that it rounds up to the step above p: the end of that step.
	below := float64(uint64(GCMinHeadroom*100)/uint64(p+1)) / (1 << 20)
	return max(goal, below*(1+GCPercent(below)/100))
}

// GCCPUFactor is how much more CPU the controller spends at the GOGC it
// runs at with liveMiB live than at GOGC=100: a collection marks the live
// heap whatever GOGC is, and collections come 100/GOGC times as often, so
// the collector's share of the CPU scales by that and the rest does not.
func GCCPUFactor(liveMiB float64) float64 {
	return (1 - GCCollectorShare) + GCCollectorShare*100/GCPercent(liveMiB)
}
