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

package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// With --shards > 1 (internal/shards): which shards this replica holds,
// how many Bars each holds, how shards changed hands, and what the API
// server sent. A shard's work queue is named bars-shard-<k>-of-<N> in the
// workqueue_* metrics.
var (
	shardHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bar_controller_shard_held",
		Help: "1 while this replica holds the shard's Lease and runs its work, else 0.",
	}, []string{"shard"})
	shardHandoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_shard_handoffs_total",
		Help: "Changes of a shard's holder as this replica saw them, by event: acquired, released (given up to rebalance or on shutdown), lost (the Lease was taken or not renewed), yielded (given back at once: replicas with another --shards still held Leases).",
	}, []string{"shard", "event"})
	shardWatchEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_shard_watch_events_total",
		Help: "Bars the API server sent a shard's list and watch, by outcome: kept (in the shard), dropped (outside it: the API server ignored the shard selector, and the client filtered).",
	}, []string{"shard", "outcome"})
	shardSelectorIgnored = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_shard_selector_ignored",
		Help: "1 once the API server sent a Bar outside the shard asked for: its ShardedListAndWatch feature gate is off, every replica receives every Bar and filters on the client.",
	})
	shardCount = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bar_controller_shards",
		Help: "The number of shards the Bars are split into (--shards), on a sharded replica; absent unsharded.",
	}, nil)
	shardBars = prometheus.NewDesc("bar_controller_shard_bars",
		"Bars in the cache of a shard this replica holds.", []string{"shard"}, nil)
)

func shardCollectors() []prometheus.Collector {
	return []prometheus.Collector{shardCount, shardHeld, shardHandoffs, shardWatchEvents, shardSelectorIgnored, shardBarsCollector{}}
}

// SetShards records the number of shards of a sharded replica.
func SetShards(n int) { shardCount.WithLabelValues().Set(float64(n)) }

// SetShardHeld records whether this replica holds a shard.
func SetShardHeld(shard string, held bool) {
	v := 0.0
	if held {
		v = 1
	}
	shardHeld.WithLabelValues(shard).Set(v)
}

// RecordShardHandoff counts one change of a shard's holder.
func RecordShardHandoff(shard, event string) {
	shardHandoffs.WithLabelValues(shard, event).Inc()
}

// RecordShardWatchEvent counts one Bar the API server sent a shard.
func RecordShardWatchEvent(shard string, kept bool) {
	outcome := "kept"
	if !kept {
		outcome = "dropped"
		shardSelectorIgnored.Set(1)
	}
	shardWatchEvents.WithLabelValues(shard, outcome).Inc()
}

// shardBarCounts are the caches of the shards held, read at each scrape.
var shardBarCounts sync.Map // shard name → func() int

// WatchShardBars reports a shard's Bars from count until the returned
// function is called.
func WatchShardBars(shard string, count func() int) (stop func()) {
	shardBarCounts.Store(shard, count)
	return func() { shardBarCounts.Delete(shard) }
}

type shardBarsCollector struct{}

func (shardBarsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- shardBars }

func (shardBarsCollector) Collect(ch chan<- prometheus.Metric) {
	shardBarCounts.Range(func(k, v any) bool {
		ch <- prometheus.MustNewConstMetric(shardBars, prometheus.GaugeValue, float64(v.(func() int)()), k.(string))
		return true
	})
}

// ForgetQueue removes the workqueue_* series of a queue that is gone (a
// shard's, once given up): a depth left at its last value would read as
// Bars waiting in a queue that no worker will ever take.
func ForgetQueue(name string) {
	for _, v := range []interface{ DeleteLabelValues(...string) bool }{
		workqueueDepth, workqueueAdds, workqueueLatency, workqueueWorkDuration,
		workqueueUnfinished, workqueueLongestRunning, workqueueRetries,
	} {
		v.DeleteLabelValues(name)
	}
}
