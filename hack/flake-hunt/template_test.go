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
	"slices"
	"testing"
)

func TestTemplate(t *testing.T) {
	// d is a duration in seconds, n a plain number.
	d := func(v float64) figure { return figure{value: v, duration: true} }
	n := func(v float64) figure { return figure{value: v} }
	tests := []struct {
		line string
		want string
		figs []figure
	}{
		{"converged in 1.234s; TokenReviews 7", "converged in {1}; TokenReviews {2}", []figure{d(1.234), n(7)}},
		// The same line from another run, in other units, has the same
		// template and figures in seconds.
		{"converged in 850ms; TokenReviews 12", "converged in {1}; TokenReviews {2}", []figure{d(0.85), n(12)}},
		{"took 2m30.5s, then 1h0m0s and 12µs and 3ns", "took {1}, then {2} and {3} and {4}", []figure{d(150.5), d(3600), d(12e-6), d(3e-9)}},
		{"0s elapsed", "{1} elapsed", []figure{d(0)}},
		// A sentence's full stop stays; a decimal point is the number's.
		{"the Bars converged in 19.1s.", "the Bars converged in {1}.", []figure{d(19.1)}},
		{"want at most 14.39s", "want at most {1}", []figure{d(14.39)}},
		// Units stay in the template; "100m" is millicores, not minutes.
		{"peak RSS 740MB at 1.46x, cpu 100m", "peak RSS {1}MB at {2}x, cpu {3}m", []figure{n(740), n(1.46), n(100)}},
		{"memory 64Mi", "memory {1}Mi", []figure{n(64)}},
		{"45% of the limit", "{1}% of the limit", []figure{n(45)}},
		{"2,000 Bars in 1m4.5s", "{1} Bars in {2}", []figure{n(2000), d(64.5)}},
		{"lists 1,2,3", "lists {1},{2},{3}", []figure{n(1), n(2), n(3)}},
		{"delta -3 and +4", "delta {1} and +{2}", []figure{n(-3), n(4)}},
		{"ratio 1.5e+06", "ratio {1}", []figure{n(1.5e6)}},
		{"answers map[401:33 429:4572 500:2]", "answers map[{1}:{2} {3}:{4} {5}:{6}]", []figure{n(401), n(33), n(429), n(4572), n(500), n(2)}},
		{"listening on 127.0.0.1:34567", "listening on 127.0.0.1:{1}", []figure{n(34567)}},
		// Names are not figures.
		{"Bar bar-001 in v1alpha1 runs nginx:1.28.0 on 10.88.0.1", "Bar bar-001 in v1alpha1 runs nginx:1.28.0 on 10.88.0.1", nil},
		{"node kwok-node-0 and e2e_test.go", "node kwok-node-0 and e2e_test.go", nil},
		// Generated names and what only dates a run become marks.
		{"Pod web-6d4f8b7c9-x2k4p in bar-it-7zq5w Ready after 1.5s", "Pod web-*-* in bar-it-* Ready after {1}", []figure{d(1.5)}},
		{"Lease held by rbac_1b4e28ba-2fa1-11d2-883f-0016d3cca427 since 2026-11-23T16:40:00.123456Z",
			"Lease held by rbac_<uuid> since <time>", nil},
		{"slow converge from 16:40:00.123 on, 3 events", "slow converge from <time> on, {1} events", []figure{n(3)}},
		{"", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			got, figs := template(tc.line)
			if got != tc.want {
				t.Errorf("template %q, want %q", got, tc.want)
			}
			if !slices.EqualFunc(figs, tc.figs, func(a, b figure) bool {
				return a.duration == b.duration && fmt.Sprintf("%.9g", a.value) == fmt.Sprintf("%.9g", b.value)
			}) {
				t.Errorf("figures %+v, want %+v", figs, tc.figs)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		v       float64
		seconds bool
		want    string
	}{
		{2000, false, "2000"},
		{1.4649, false, "1.465"},
		{8.3, true, "8.3s"},
		{19, true, "19s"},
		{0, true, "0s"},
		{0.000012, true, "1.2e-05s"},
		{0.85, true, "0.85s"},
	}
	for _, tc := range tests {
		if got := format(tc.v, tc.seconds); got != tc.want {
			t.Errorf("format(%v, %v) = %q, want %q", tc.v, tc.seconds, got, tc.want)
		}
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		vs           []float64
		lo, med, max float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{8.3, 19.1, 10.08}, 8.3, 10.08, 19.1},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		lo, med, hi := spread(tc.vs)
		if lo != tc.lo || med != tc.med || hi != tc.max {
			t.Errorf("spread(%v) = %v, %v, %v; want %v, %v, %v", tc.vs, lo, med, hi, tc.lo, tc.med, tc.max)
		}
	}
}
