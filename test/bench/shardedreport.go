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
	"runtime"
	"strings"
	"time"
)

// The sharded part of a report is written between these two lines, so
// that the sharded bench and the main one each rewrite only their own
// part of the same file (docs/benchmarks-large.md holds both).
const (
	shardedBegin = "<!-- Sharded part: written by `make bench-sharded` (bin/bench --shards); do not edit by hand. -->"
	shardedEnd   = "<!-- End of the sharded part. -->"
)

// spliceSharded returns doc with its sharded part replaced by section
// (which carries both markers), or with section appended if doc has none.
func spliceSharded(doc, section string) string {
	return splicePart(doc, shardedBegin, shardedEnd, section)
}

// shardedPart is doc's sharded part with both markers, if it has one.
func shardedPart(doc string) (string, bool) { return partOf(doc, shardedBegin, shardedEnd) }

// splicePart returns doc with the part between the markers begin and end
// replaced by section (which carries both), or with section appended if
// doc has no such part.
func splicePart(doc, begin, end, section string) string {
	b := strings.Index(doc, begin)
	e := strings.Index(doc, end)
	if b < 0 || e < b {
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	if rest := strings.TrimLeft(doc[e+len(end):], "\n"); rest != "" {
		return doc[:b] + section + "\n" + rest
	}
	return doc[:b] + section
}

// partOf is doc's part between the markers, both included, if it has one.
func partOf(doc, begin, end string) (string, bool) {
	b := strings.Index(doc, begin)
	e := strings.Index(doc, end)
	if b < 0 || e < b {
		return "", false
	}
	return doc[b:e+len(end)] + "\n", true
}

// shardedTable is one line per configuration. The per-replica columns
// list each replica's value, " / " between them.
func shardedTable(res shardedResult) string {
	var b strings.Builder
	b.WriteString("| replicas | shards | Bars | converge (÷ floor) | writes per Bar (Deployment + status + Event) | API server + etcd CPU | per replica: shards held | Bars cached | Bar events received (dropped) | peak RSS | live heap | CPU | read |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.Rows {
		var held, cached, received, rss, live, cpu, read []string
		for _, u := range r.PerReplica {
			held = append(held, fmt.Sprint(u.Shards))
			cached = append(cached, fmt.Sprintf("%.0f (%.1f %%)", u.Bars, 100*u.Bars/float64(r.N)))
			received = append(received, fmt.Sprintf("%.0f (%.0f)", u.Kept+u.Dropped, u.Dropped))
			rss = append(rss, fmt.Sprintf("%.0f MB", mb(u.PeakRSS)))
			live = append(live, fmt.Sprintf("%.0f MB", mb(u.Live)))
			cpu = append(cpu, secs(u.CPU))
			read = append(read, fmt.Sprintf("%.0f MB", mb(u.Read)))
		}
		shards := fmt.Sprint(r.Shards)
		if r.Shards == 1 {
			shards, held, received = "unsharded", []string{"—"}, []string{"—"}
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s (%.2fx) | %.2f + %.2f + %.2f | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Replicas, shards, r.N, secs(r.Converge), r.Converge.Seconds()/res.Floor.Seconds(),
			r.DeploymentWrites, r.StatusWrites, r.EventWrites, secs(r.ServerCPU),
			strings.Join(held, " / "), strings.Join(cached, " / "), strings.Join(received, " / "), strings.Join(rss, " / "),
			strings.Join(live, " / "), strings.Join(cpu, " / "), strings.Join(read, " / "))
	}
	return b.String()
}

// shardedSection is the report's sharded part, markers included.
func shardedSection(res shardedResult, table, build string, inflight int) string {
	var b strings.Builder
	b.WriteString(shardedBegin + "\n\n")
	fmt.Fprintf(&b, `## Sharded: one replica's cost with %d shards

Written by `+"`make bench-sharded`"+` (test/bench, `+"`--shards`"+`) on %s, %s, %s, %d CPUs,
on a control plane of its own with kube-apiserver's ShardedListAndWatch
feature gate on, so that each replica receives only its shards' Bars
(docs/sharding.md). One floor (%d Bars, %d requests in flight, as above):
%s. Then per line, a cold start of %d new Bars in a fresh namespace: first
the unsharded controller alone, as in the table above (with
`+"`--profiling`"+`), the same run's yardstick; then that many fresh replicas,
each with `+"`--leader-elect --shards=%d --profiling`"+` under the shipped
ServiceAccount and the sharded overlay's Lease grant (artifacts/sharded),
once they had shared the shards out (the time that took is not in
converge).

- **converge**: from the first Bar create until every Bar was done, and
  its ratio to the floor.
- **writes per Bar**: the API server's counts over the run until every
  Event was written, the Bar creates and the replicas' Lease renewals
  taken out.
- **Bars cached**: the sum of each replica's bar_controller_shard_bars,
  and its share of the Bars; **Bar events received**: its
  bar_controller_shard_watch_events_total, the Bars the API server sent
  its shards' informers (a Bar's create and its status, two a Bar), and
  in brackets those outside its shards that it dropped (0 when the API
  server honours the selector).
- **peak RSS** (VmHWM), **live heap** (after a collection, once its
  queues were empty), **CPU** (user + system over its whole life:
  start, the shards' share-out, the run) and **read** (rchar of
  /proc/<pid>/io: what its read calls returned, almost all of it the API
  server's answers on its TLS connections, the watch streams above all)
  per replica.

One shard selector's match of one Bar, the test the watch cache makes
for each sharded watcher and each event (the selector as the API
server's parser builds it, by testing.Benchmark in this run): %d ns.

`, res.Shards, time.Now().UTC().Format("2006-01-02 15:04 MST"), build, runtime.Version(), runtime.NumCPU(),
		res.N, inflight, secs(res.Floor), res.N, res.Shards, res.MatchCost.Nanoseconds())
	b.WriteString(table)
	b.WriteString("\n" + shardedEnd + "\n")
	return b.String()
}
