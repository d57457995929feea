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
	"testing"
)

// A sharded table as test/bench writes it (shardedreport.go), read back.
const shardedPart = `One shard selector's match of one Bar, the test the watch cache makes
for each sharded watcher and each event (the selector as the API
server's parser builds it, by testing.Benchmark in this run): 312 ns.

| replicas | shards | Bars | converge (÷ floor) | writes per Bar (Deployment + status + Event) | API server + etcd CPU | per replica: shards held | Bars cached | Bar events received (dropped) | peak RSS | live heap | CPU | read |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| 1 | unsharded | 500 | 2.2 s (1.52x) | 1.00 + 1.00 + 1.00 | 3.5 s | — | 500 (100.0 %) | — | 45 MB | 6 MB | 0.5 s | 3 MB |
| 3 | 6 | 500 | 3.1 s (2.17x) | 1.00 + 1.00 + 1.00 | 4.9 s | 2 / 2 / 2 | 159 (31.8 %) / 160 (32.0 %) / 181 (36.2 %) | 318 (0) / 320 (0) / 362 (0) | 43 MB / 42 MB / 44 MB | 4 MB / 4 MB / 5 MB | 0.3 s / 0.3 s / 0.4 s | 1 MB / 1 MB / 2 MB |
`

func TestParseSharded(t *testing.T) {
	rows, ns, err := ParseSharded("r.md", "# Benchmarks\n\n"+shardedPart)
	if err != nil {
		t.Fatal(err)
	}
	if ns != 312 {
		t.Errorf("match cost %v ns, want 312", ns)
	}
	if len(rows) != 2 || rows[0].Shards != 1 || rows[0].Replicas != 1 || rows[1].Shards != 6 || rows[1].Replicas != 3 {
		t.Fatalf("rows %+v", rows)
	}
	want := Replica{Bars: 181, PeakRSS: 44, Live: 5, CPU: 0.4, Read: 2}
	if got := rows[1].Largest(); got != want {
		t.Errorf("largest replica %+v, want %+v", got, want)
	}
	if none, _, err := ParseSharded("r.md", "# no sharded part\n"); err != nil || none != nil {
		t.Errorf("a report without a sharded part: %v, %v", none, err)
	}
}

// One replica of R holds about 1/R of the Bars: with no overheads and no
// skew, its live heap is the unsharded line at B/R.
func TestSizeReplicaIsTheLineAtItsShare(t *testing.T) {
	m, _ := committed(t)
	o := Overheads{Heap: 1, RSS: 1, CPU: 1, ReadPerBar: 0.01, Skew: 1}
	n := SizeReplica(m, o, 300, 600000, 3, 6)
	if n.Bars != 200000 || math.Abs(n.Live-m.Predict("heap", 200000)) > 1e-9 {
		t.Errorf("%+v; want 200,000 Bars and the heap line's %.1f MiB", n, m.Predict("heap", 200000))
	}
	// 600,000 Bars, two events each, six shard watches, 300 ns a match.
	if want := 2 * 600000 * 6 * 300e-9; math.Abs(n.MatchCPU-want) > 1e-9 {
		t.Errorf("match CPU %v s, want %v", n.MatchCPU, want)
	}
}
