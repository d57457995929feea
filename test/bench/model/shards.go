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
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The sharded part of a report (test/bench's --shards, make
// bench-sharded): per configuration, each replica's share and cost. The
// model reads it to say what one replica of a sharded controller needs:
// the unsharded lines at the replica's share of the Bars, scaled by what
// the measured replicas cost beyond those lines.

// ShardedRow is one line of the sharded table.
type ShardedRow struct {
	Report   string
	Replicas int
	Shards   int // 1: the unsharded controller, the run's yardstick
	N        int
	Headroom int // the replicas' --gc-headroom-percent (the part's header)
	Replica  []Replica
}

// Replica is one replica's figures: Bars in its caches, peak RSS, live
// heap and bytes read in MiB, CPU in seconds.
type Replica struct{ Bars, PeakRSS, Live, CPU, Read float64 }

// Largest is the replica with the most Bars cached.
func (r ShardedRow) Largest() Replica {
	return slices.MaxFunc(r.Replica, func(a, b Replica) int { return cmp.Compare(a.Bars, b.Bars) })
}

// The sharded table's columns, by their headers.
const (
	colReplicas = "replicas"
	colShards   = "shards"
	colCached   = "Bars cached"
	colRead     = "read"
)

var matchCostRe = regexp.MustCompile(`for each sharded watcher and each event[^:]*: ([0-9]+) ns`)

// ParseSharded reads the sharded table of a report, if it has one, and
// the cost of one shard selector's match the same run measured (ns).
func ParseSharded(name, text string) (rows []ShardedRow, matchNs float64, err error) {
	lines := strings.Split(text, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| "+colReplicas+" | "+colShards+" |") })
	if start < 0 {
		return nil, 0, nil
	}
	if m := matchCostRe.FindStringSubmatch(text); m != nil {
		matchNs, _ = strconv.ParseFloat(m[1], 64)
	}
	headroom := headroomOf(text, "Written by `make bench-sharded`")
	header := cells(lines[start])
	col := map[string]int{}
	for _, want := range []string{colReplicas, colShards, colBars, colCached, colRSS, colHeap, colCPU, colRead} {
		i := slices.Index(header, want)
		if i < 0 {
			return nil, 0, fmt.Errorf("%s: the sharded table has no column %q", name, want)
		}
		col[want] = i
	}
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		c := cells(l)
		r := ShardedRow{Report: name, Shards: 1, Headroom: headroom}
		var err error
		one := func(s string) float64 {
			v, e := leading(s)
			if err == nil && e != nil {
				err = e
			}
			return v
		}
		r.Replicas = int(one(c[col[colReplicas]]))
		if s := c[col[colShards]]; s != "unsharded" {
			r.Shards = int(one(s))
		}
		r.N = int(one(c[col[colBars]]))
		each := func(key string) []float64 {
			var vs []float64
			for s := range strings.SplitSeq(c[col[key]], " / ") {
				vs = append(vs, one(s))
			}
			return vs
		}
		bars, rss, live, cpu, read := each(colCached), each(colRSS), each(colHeap), each(colCPU), each(colRead)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %q: %w", name, l, err)
		}
		for i := range bars {
			if len(rss) != len(bars) || len(live) != len(bars) || len(cpu) != len(bars) || len(read) != len(bars) {
				return nil, 0, fmt.Errorf("%s: %q: the replicas' columns differ in length", name, l)
			}
			r.Replica = append(r.Replica, Replica{Bars: bars[i], PeakRSS: rss[i], Live: live[i], CPU: cpu[i], Read: read[i]})
		}
		rows = append(rows, r)
	}
	return rows, matchNs, nil
}

// ReplicaNeeds is what one replica of R, holding Bars of the B a cluster
// has, needs by the model.
type ReplicaNeeds struct {
	B, Replicas, Shards  int
	Bars                 float64 // the largest replica's share
	Live, PeakRSS, Limit float64 // MiB
	CPU                  float64 // s: its own CPU over a cold start
	Read                 float64 // MiB read over a cold start
	// MatchCPU is what the API server spends testing every Bar event
	// against every shard's watch over a cold start (s), and MatchShare
	// that against its and etcd's CPU for the cold start (ServerRun).
	MatchCPU, MatchShare float64
}

// Overheads are what the measured replicas cost beyond the unsharded
// lines at their own share: for the largest replica of the row with the
// most replicas, each figure measured ÷ the model's at its share, over
// the same quotient for the same run's unsharded controller at every
// Bar. The second quotient takes out what the run's machine and commit
// change for every controller alike (a faster machine spends less CPU
// per Bar than the reports the lines were fitted to), leaving what
// sharding adds.
type Overheads struct {
	From                             ShardedRow
	Heap, RSS, CPU, ReadPerBar, Skew float64
}

// MeasuredOverheads reads the overheads off the sharded row with the
// most replicas. Skew is its largest share of the Bars × its replicas:
// 1 when the hash spreads them evenly.
func MeasuredOverheads(m Model, rows []ShardedRow) (Overheads, bool) {
	i := -1
	for j, r := range rows {
		if r.Shards > 1 && (i < 0 || r.Replicas > rows[i].Replicas) {
			i = j
		}
	}
	if i < 0 {
		return Overheads{}, false
	}
	r := rows[i]
	against := func(x Replica) (heap, rss, cpu float64) {
		live := m.Predict("heap", x.Bars)
		return x.Live / live, x.PeakRSS / m.Lines["rss"].At(HeapGoalAt(live, r.Headroom)), x.CPU / m.PredictAt("cpu", x.Bars, r.Headroom)
	}
	heap, rss, cpu := against(r.Largest())
	if u := slices.IndexFunc(rows, func(r ShardedRow) bool { return r.Shards == 1 }); u >= 0 {
		h, s, c := against(rows[u].Largest())
		heap, rss, cpu = heap/h, rss/s, cpu/c
	}
	big := r.Largest()
	return Overheads{From: r, Heap: heap, RSS: rss, CPU: cpu,
		ReadPerBar: big.Read / big.Bars, Skew: big.Bars * float64(r.Replicas) / float64(r.N)}, true
}

// SizeReplica is one replica's needs when replicas share shards shards of
// b Bars, with the overheads measured.
func SizeReplica(m Model, o Overheads, matchNs float64, b, replicas, shards int) ReplicaNeeds {
	bars := float64(b) / float64(replicas) * o.Skew
	live := m.Predict("heap", bars) * o.Heap
	peak := m.Lines["rss"].At(HeapGoal(live)) * o.RSS
	cpu := m.Lines["cpu"].At(bars) * GCCPUFactor(live) * o.CPU
	// Each Bar comes as two watch events (its create, its status), each
	// tested against every shard's Bar watch.
	match := 2 * float64(b) * float64(shards) * matchNs / 1e9
	return ReplicaNeeds{B: b, Replicas: replicas, Shards: shards, Bars: bars, Live: live, PeakRSS: peak, Limit: limitFor(peak),
		CPU: cpu, Read: o.ReadPerBar * bars, MatchCPU: match, MatchShare: match / m.Predict("server", float64(b))}
}

// ShardedShapes are the clusters the doc sizes: Bars, then replicas, each
// with two shards (the sharded overlay's shape).
var ShardedShapes = []struct{ Bars, Replicas int }{
	{500000, 3}, {500000, 6}, {500000, 12},
	{5000000, 12}, {5000000, 24}, {5000000, 48},
}

// ShardsMarkdown is the generated part's section on shards.
func ShardsMarkdown(m Model, rows []ShardedRow, matchNs float64) string {
	o, ok := MeasuredOverheads(m, rows)
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Shards: one replica against the model\n\nFrom %s's sharded part, at %s Bars: each configuration's largest replica (by Bars cached) against the unsharded lines at its own share, and at the --gc-headroom-percent it ran with, %d.\n\n",
		o.From.Report, thousands(float64(o.From.N)), o.From.Headroom)
	b.WriteString("| replicas | shards | Bars cached, largest replica | live heap: measured, model | peak RSS: measured, model | CPU: measured, model | read |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		big := r.Largest()
		live := m.Predict("heap", big.Bars)
		shards := strconv.Itoa(r.Shards)
		if r.Shards == 1 {
			shards = "unsharded"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s, %s | %s, %s | %s, %s | %s |\n", r.Replicas, shards, thousands(big.Bars),
			mib(big.Live), mib(live), mib(big.PeakRSS), mib(m.Lines["rss"].At(HeapGoalAt(live, r.Headroom))),
			value(big.CPU, "s"), value(m.PredictAt("cpu", big.Bars, r.Headroom), "s"), mib(big.Read))
	}
	fmt.Fprintf(&b, "\nWhat the %d-replica row's largest replica costs beyond its share, each figure's measured ÷ model over the unsharded row's: live heap ×%.2f, peak RSS ×%.2f, CPU ×%.2f; %.1f KiB read per Bar cached; the largest share ×%.3f of an even one. One shard selector's match of a Bar: %.0f ns.\n",
		o.From.Replicas, o.Heap, o.RSS, o.CPU, o.ReadPerBar*1024, o.Skew, matchNs)

	b.WriteString("\n### Shards: what one replica needs\n\n| Bars | replicas | shards | Bars per replica, largest | live heap | peak RSS, no limit | memory limit | CPU of a cold start, its own | read over it | API server: matching every Bar event against every shard | of its and etcd's CPU for the cold start |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range ShardedShapes {
		n := SizeReplica(m, o, matchNs, s.Bars, s.Replicas, 2*s.Replicas)
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %.3f %% |\n", thousands(float64(n.B)), n.Replicas, n.Shards,
			thousands(n.Bars), mib(n.Live), mib(n.PeakRSS), quantity(n.Limit), value(n.CPU, "s"), mib(n.Read), value(n.MatchCPU, "s"), n.MatchShare*100)
	}
	return b.String()
}
