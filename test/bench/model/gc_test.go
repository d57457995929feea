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

import "testing"

// The policy's values at the reports' live heaps; the root package's
// gcmodel_test.go checks every live heap against internal/memory itself.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct{ live, want float64 }{
		{0, 50},     // internal/memory's too: no live heap read, no floor
		{6.0, 100},  // 500 Bars
		{32, 100},   // the floor of 32 MiB is the live heap itself
		{35.1, 100}, // 91 %, rounded up
		{37.0, 90},  // 5,000 Bars: 86 %, rounded up
		{40, 80},    // exactly 80 %
		{62.7, 60},  // 51 %, rounded up
		{62.8, 50},  // 50.9 %, whose integer part is 50
		{340.7, 50}, // 50,000 Bars
		{4096, 50},
	} {
		if got := GCPercent(tc.live); got != tc.want {
			t.Errorf("GCPercent(%v MiB) = %v, want %v", tc.live, got, tc.want)
		}
	}
}

func TestHeapGoal(t *testing.T) {
	for _, tc := range []struct{ live, want float64 }{
		{16, 32},   // GOGC=100: twice the live heap
		{340, 510}, // GOGC=50: one and a half
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
	// Twice the collections, each the same work: the collector's 26 %
	// doubles.
	if got, want := GCCPUFactor(340), 1+GCCollectorShare; !near(got, want) {
		t.Errorf("at GOGC=50 the factor is %v, want %v", got, want)
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
