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
	"net/http"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// peakMemory is what the controller's own metrics said of its memory at
// the scrape where its RSS was highest during a cold start: VmHWM says how
// high the peak was, this says what it was made of. The runtime's figures
// come from runtime/metrics through client_golang's Go collector.
type peakMemory struct {
	RSS float64 // process_resident_memory_bytes
	// HeapInuse is the heap's spans holding objects, live or not yet
	// collected; HeapGoal where the next collection starts
	// (go_memstats_next_gc_bytes); GOGC the percent the tuner set.
	HeapInuse, HeapGoal, GOGC float64
	// Retained is heap memory free but not yet returned to the OS
	// (heap idle - heap released): the scavenger gives it back slowly.
	Retained float64
	// Runtime is the rest the runtime counts: goroutine stacks, span and
	// cache structures, the collector's metadata, profiling buckets.
	Runtime float64
}

// LiveAtPeak is the live heap the last collection before the peak found:
// the goal is that times (1 + GOGC/100).
func (p peakMemory) LiveAtPeak() float64 {
	if p.GOGC <= 0 {
		return 0
	}
	return p.HeapGoal / (1 + p.GOGC/100)
}

// Outside is the part of RSS the runtime's figures do not account for:
// the binary's text and data, and the C and kernel side of the process.
func (p peakMemory) Outside() float64 {
	return p.RSS - p.HeapInuse - p.Retained - p.Runtime
}

// peakSampleInterval is how often samplePeak scrapes.
const peakSampleInterval = 250 * time.Millisecond

// samplePeak scrapes the controller's /metrics every interval until ctx
// ends, and sends the sample of the highest RSS. The runs that sample are
// the GC headroom part's, the steady row's last (which a restart is
// compared with) and the restart; a scrape costs the controller about a
// millisecond, at 4 a second well under 1 % of a core.
func samplePeak(ctx context.Context, metricsAddr, token string, interval time.Duration) <-chan peakMemory {
	out := make(chan peakMemory, 1)
	go func() {
		client := loopbackClient()
		// As in waitQueueEmpty: no pooled gzip writers in the controller.
		client.Transport.(*http.Transport).DisableCompression = true
		// A scrape that hangs must not hold up the run that waits for
		// the sample.
		client.Timeout = 5 * time.Second
		defer client.CloseIdleConnections()
		var best peakMemory
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if m, err := localcluster.Scrape(client, "https://"+metricsAddr+"/metrics", token); err == nil {
				if s := memoryOf(m); s.RSS > best.RSS {
					best = s
				}
			}
			select {
			case <-ctx.Done():
				out <- best
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

func memoryOf(m localcluster.Metrics) peakMemory {
	v := func(name string) float64 { x, _ := m.Value(name, nil); return x }
	return peakMemory{
		RSS:       v("process_resident_memory_bytes"),
		HeapInuse: v("go_memstats_heap_inuse_bytes"),
		HeapGoal:  v("go_memstats_next_gc_bytes"),
		GOGC:      v("go_gc_gogc_percent"),
		Retained:  v("go_memstats_heap_idle_bytes") - v("go_memstats_heap_released_bytes"),
		Runtime: v("go_memstats_stack_inuse_bytes") + v("go_memstats_mspan_inuse_bytes") + v("go_memstats_mcache_inuse_bytes") +
			v("go_memstats_buck_hash_sys_bytes") + v("go_memstats_gc_sys_bytes") + v("go_memstats_other_sys_bytes"),
	}
}

// mbf is mb for the metrics' float bytes.
func mbf(b float64) float64 { return b / (1 << 20) }

func mbPair(a, b float64) string { return fmt.Sprintf("%.1f / %.1f MB", mbf(a), mbf(b)) }
