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
	"math"
	"testing"
	"time"
)

func TestDistributionOf(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := distributionOf(d)
	want := distribution{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Errorf("distributionOf(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := distributionOf([]time.Duration{7}); got.P50 != 7 || got.P99 != 7 || got.Max != 7 {
		t.Errorf("one sample: %+v, want it everywhere", got)
	}
	if got := distributionOf(nil); got != (distribution{}) {
		t.Errorf("no samples: %+v", got)
	}
}

// The quantile is Prometheus's histogram_quantile, on the difference of
// two scrapes.
func TestHistogramQuantile(t *testing.T) {
	before := histogram{0.001: 10, 0.01: 10, 0.1: 10, math.Inf(1): 10}
	after := histogram{0.001: 10, 0.01: 60, 0.1: 110, math.Inf(1): 110}
	h := after.minus(before)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0.25, 5500 * time.Microsecond}, // rank 25 of 100, halfway into (1 ms, 10 ms]
		{0.75, 55 * time.Millisecond},   // rank 75, halfway into (10 ms, 100 ms]
		{1, 100 * time.Millisecond},
	} {
		if got := h.quantile(c.q); (got - c.want).Abs() > time.Microsecond {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := (histogram{}).quantile(0.99); got != 0 {
		t.Errorf("empty: %v", got)
	}
	over := histogram{0.1: 0, math.Inf(1): 5}
	if got := over.quantile(0.5); got != 100*time.Millisecond {
		t.Errorf("all above the last bound: %v, want the bound", got)
	}
}
