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
	"strings"
	"testing"
	"time"
)

// The peer divides by every floor of its row, the last one too, which
// comes after its last run: a row of floors 1, 2 and 9 s has the median
// 2 s; without the last floor it would be 1.5 s.
func TestPeerRatioUsesAllTheRowsFloors(t *testing.T) {
	r := result{
		N:           500,
		Floors:      []time.Duration{time.Second, 2 * time.Second, 9 * time.Second},
		Controllers: []time.Duration{3 * time.Second, 3 * time.Second},
		Peer:        &result{N: 500, Controllers: []time.Duration{4 * time.Second, 4 * time.Second}},
	}
	if got := peerRatio(r); got != 2 {
		t.Errorf("peerRatio = %v, want 2 (4 s over the median of all three floors)", got)
	}
	if row := peerTable([]result{r}); !strings.Contains(row, "| 1.50× / 2.00× |") {
		t.Errorf("peerTable does not put 1.50× beside 2.00×:\n%s", row)
	}
}

func TestCompareCounts(t *testing.T) {
	for _, tc := range []struct {
		ours, peer float64
		format     string
		want       string
	}{
		{0, 0, "%g", "even (0 both)"},
		{3.0, 3.004, "%.2f", "even (3.00 both)"}, // what the report cannot show is not a lead
		{2.99, 3.0, "%.2f", "ahead"},
		{63.0, 101.8, "%.1f MB", "ahead"},
		{1, 0, "%g", "**behind**"},
	} {
		if got := compareCounts(tc.ours, tc.peer, tc.format); got != tc.want {
			t.Errorf("compareCounts(%v, %v, %q) = %q, want %q", tc.ours, tc.peer, tc.format, got, tc.want)
		}
	}
}

func TestCompareRuns(t *testing.T) {
	s := func(xs ...float64) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x*float64(time.Second)))
		}
		return ds
	}
	for _, tc := range []struct {
		ours, peer []time.Duration
		want       string
	}{
		{s(10, 12), s(11, 11), "even (+0.0 s, within the runs' own spread of 2.0 s)"},
		{s(10, 10.5), s(13, 13.2), "ahead"},
		{s(13, 13.2), s(10, 10.5), "**behind**"},
	} {
		if got := compareRuns(tc.ours, tc.peer); got != tc.want {
			t.Errorf("compareRuns(%v, %v) = %q, want %q", tc.ours, tc.peer, got, tc.want)
		}
	}
}
