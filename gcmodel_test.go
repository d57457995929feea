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
	"flag"
	"testing"

	"github.com/barcontroller/bar-controller/internal/memory"
	"github.com/barcontroller/bar-controller/test/bench/model"
)

// TestGCModelMatchesTuner checks that the sizing model's copy of the GC
// policy (test/bench/model/gc.go), from which docs/sizing-model.md
// predicts peak RSS and CPU, is the policy the controller ships: the same
// constants, and the same GOGC for every live heap from 1 MiB to 4 GiB.
func TestGCModelMatchesTuner(t *testing.T) {
	var o options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.gcHeadroom != model.GCHeadroomPercent {
		t.Errorf("--gc-headroom-percent defaults to %d, the sizing model assumes %d", o.gcHeadroom, model.GCHeadroomPercent)
	}
	if memory.MinHeadroom != model.GCMinHeadroom {
		t.Errorf("memory.MinHeadroom is %d, the sizing model assumes %d", memory.MinHeadroom, model.GCMinHeadroom)
	}

	const mib = 1 << 20
	// Every step of the policy lies between 32 MiB and 32 MiB*100/headroom
	// (160 MiB at 20); the quotient's integer division changes at
	// minHeadroom*100/k, so test either side of each, and a geometric
	// sweep everywhere else.
	lives := []uint64{}
	for k := uint64(max(o.gcHeadroom-10, 1)); k <= 110; k++ {
		b := uint64(memory.MinHeadroom) * 100 / k
		lives = append(lives, b-1, b, b+1)
	}
	for b := float64(mib); b <= 4<<30; b *= 1.001 {
		lives = append(lives, uint64(b))
	}
	lives = append(lives, 4<<30)
	steps := map[int]bool{}
	for _, live := range lives {
		want := memory.GCPercent(live, o.gcHeadroom, memory.MinHeadroom)
		steps[want] = true
		if got := model.GCPercent(float64(live) / mib); got != float64(want) {
			t.Errorf("%d bytes live: the model says GOGC=%v, the controller sets %d", live, got, want)
		}
	}
	// The fits read each report at its own headroom: the model's
	// GOGC must be the controller's at those too.
	for _, h := range []int{30, 50, 100} {
		for _, live := range lives {
			if got, want := model.GCPercentAt(float64(live)/mib, h), memory.GCPercent(live, h, memory.MinHeadroom); got != float64(want) {
				t.Errorf("--gc-headroom-percent=%d, %d bytes live: the model says GOGC=%v, the controller sets %d", h, live, got, want)
				break
			}
		}
	}
	// A sweep that missed the steps would prove little.
	for p := 100; p >= o.gcHeadroom; p -= 10 {
		if !steps[p] {
			t.Errorf("no live heap tested at GOGC=%d", p)
		}
	}
}
