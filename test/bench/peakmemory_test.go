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

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

func gauge(name string, v float64) *dto.MetricFamily {
	return &dto.MetricFamily{Name: ptr.To(name), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: ptr.To(v)}}}}
}

// A peak of 500 MiB: 400 of heap in use, 40 freed and kept, 20 of the
// runtime's own, so 40 the figures do not cover; the goal 360 MiB at
// GOGC 20 means the collection before found 300 MiB live.
func TestMemoryOf(t *testing.T) {
	const mib = 1 << 20
	m := localcluster.Metrics{}
	for name, v := range map[string]float64{
		"process_resident_memory_bytes":   500 * mib,
		"go_memstats_heap_inuse_bytes":    400 * mib,
		"go_memstats_next_gc_bytes":       360 * mib,
		"go_gc_gogc_percent":              20,
		"go_memstats_heap_idle_bytes":     100 * mib,
		"go_memstats_heap_released_bytes": 60 * mib,
		"go_memstats_stack_inuse_bytes":   4 * mib,
		"go_memstats_mspan_inuse_bytes":   6 * mib,
		"go_memstats_mcache_inuse_bytes":  0,
		"go_memstats_buck_hash_sys_bytes": 0,
		"go_memstats_gc_sys_bytes":        8 * mib,
		"go_memstats_other_sys_bytes":     2 * mib,
	} {
		m[name] = gauge(name, v)
	}
	p := memoryOf(m)
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"retained", p.Retained, 40 * mib},
		{"runtime", p.Runtime, 20 * mib},
		{"outside", p.Outside(), 40 * mib},
		{"live at the peak", p.LiveAtPeak(), 300 * mib},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v MiB, want %v MiB", c.what, c.got/mib, c.want/mib)
		}
	}
	// Without GOGC (an old controller's metrics) nothing is made up.
	if got := (peakMemory{HeapGoal: 1}).LiveAtPeak(); got != 0 {
		t.Errorf("LiveAtPeak without GOGC = %v, want 0", got)
	}
	row := peakTable([]gcResult{{N: 50000, Runs: []gcRun{{Headroom: 20, Live: 280 * mib, Peak: p}}}})
	if want := "| 50000 | 20 | 500.0 MB | 400.0 MB | 360.0 MB (20) | 300.0 MB | 280.0 MB | 40.0 MB | 20.0 MB | 40.0 MB |"; !strings.Contains(row, want) {
		t.Errorf("peakTable lacks %q:\n%s", want, row)
	}
}
