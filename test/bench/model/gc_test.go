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

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The policy's values at the reports' live heaps; the root package's
// gcmodel_test.go checks every live heap against internal/memory itself.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct{ live, want float64 }{
		{0, 20},     // internal/memory's too: no live heap read, no floor
		{6.0, 100},  // 500 Bars
		{32, 100},   // the floor of 32 MiB is the live heap itself
		{35.1, 100}, // 91 %, rounded up
		{37.0, 90},  // 5,000 Bars: 86 %, rounded up
		{40, 80},    // exactly 80 %
		{62.7, 60},  // 51 %, rounded up
		{62.8, 50},  // 50.9 %, whose integer part is 50
		{150, 30},   // 21.3 %, rounded up
		{160, 20},   // 32 MiB is a fifth of it
		{340.7, 20}, // 50,000 Bars
		{4096, 20},
	} {
		if got := GCPercent(tc.live); got != tc.want {
			t.Errorf("GCPercent(%v MiB) = %v, want %v", tc.live, got, tc.want)
		}
	}
}

func TestHeapGoal(t *testing.T) {
	for _, tc := range []struct{ live, want float64 }{
		{16, 32},   // GOGC=100: twice the live heap
		{340, 408}, // GOGC=20: 1.2 times
	} {
		if got := HeapGoal(tc.live); !near(got, tc.want) {
			t.Errorf("HeapGoal(%v) = %v, want %v", tc.live, got, tc.want)
		}
	}
	// Just past a step down, the goal is the one just before it: 40 MiB
	// at GOGC=80 would be 72 MiB, but the heap reached about 75 on its way.
	if got := HeapGoal(40.01); got < 75 {
		t.Errorf("HeapGoal(40.01) = %v, want the 75 MiB reached just below 39.51 MiB", got)
	}
	// Never lower for a larger live heap, in 1/64 MiB steps through every
	// step of the policy.
	prev := 0.0
	for live := 0.0; live <= 200; live += 1.0 / 64 {
		g := HeapGoal(live)
		if g < prev {
			t.Fatalf("HeapGoal(%v) = %v, below %v just before", live, g, prev)
		}
		prev = g
	}
}

func TestGCCPUFactor(t *testing.T) {
	if got := GCCPUFactor(10); !near(got, 1) {
		t.Errorf("at GOGC=100 the factor is %v, want 1", got)
	}
	// A cold start at GOGC=20 marks three times what it marks at 100.
	if got, want := GCCPUFactor(340), 1+2*GCCollectorShare; !near(got, want) {
		t.Errorf("at GOGC=20 the factor is %v, want %v", got, want)
	}
}

// Peak RSS and CPU are not lines in N, so the Bars a limit or a time
// allows are found by bisection: the largest N the curve allows, which is
// past n where the curve is flat (peak RSS just after a step of GOGC).
func TestSolveCurves(t *testing.T) {
	m, err := Fit([]Row{row(500), row(2000), row(5000)})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"rss", "cpu", "run"} {
		for _, n := range []float64{3000, 7000, 50000, 500000} {
			y := m.Predict(key, n)
			got := solve(m, key, y)
			if got < n*(1-1e-5) || m.Predict(key, got) > y || m.Predict(key, got*(1+1e-5)) <= y {
				t.Errorf("%s reaches %v at %v Bars, solve says %v", key, y, n, got)
			}
		}
	}
}

// TestCollectorShareIsTheGCBenchs checks GCCollectorShare against the
// committed make bench-gc: at its largest size, each headroom's CPU over
// Go's GOGC=100 run is 1 + f·(coldStartMarking(GOGC) − 1), f fitted by
// least squares through the origin. The model rests on f wherever the tuner's GOGC is
// below 100, so a regenerated GC part that moves it fails here.
func TestCollectorShareIsTheGCBenchs(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs/benchmarks-large.md"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := ParseGCPart(string(text))
	if err != nil {
		t.Fatal(err)
	}
	f, n, err := FitCollectorShare(runs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("at %d Bars the collector's share of a cold start at GOGC=100 is %.3f (GCCollectorShare %.2f)", n, f, GCCollectorShare)
	if math.Abs(f-GCCollectorShare) > 0.03 {
		t.Errorf("make bench-gc at %d Bars gives the collector a share of %.3f at GOGC=100; GCCollectorShare is %.2f", n, f, GCCollectorShare)
	}
}

func TestFitCollectorShare(t *testing.T) {
	// CPU 100 at GOGC=100, the collector 15 % of it: a cold start marks
	// 1.5 times as much at GOGC=50, 3 times at 20. At 100 MiB live the
	// tuner holds 32 MiB of headroom whatever is asked below 40 %:
	// GOGC=40, 1.75 times.
	runs := []GCRun{{N: 5000, Headroom: 0, CPU: 1}, {N: 50000, Headroom: 0, CPU: 100}, {N: 50000, Headroom: 50, LiveMiB: 300, CPU: 107.5},
		{N: 50000, Headroom: 20, LiveMiB: 300, CPU: 130}, {N: 50000, Headroom: 10, LiveMiB: 100, CPU: 111.25}}
	f, n, err := FitCollectorShare(runs)
	if err != nil || n != 50000 || !near(f, 0.15) {
		t.Errorf("FitCollectorShare = %v at %d (%v), want 0.15 at 50000", f, n, err)
	}
	if _, _, err := FitCollectorShare(runs[2:]); err == nil {
		t.Error("no run at Go's GOGC=100 to compare with: want an error")
	}
}
