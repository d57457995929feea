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
	"github.com/prometheus/client_golang/prometheus"
)

// The adaptive concurrency limit (internal/adaptive): how many syncs and
// Event writes may be in flight, how many are, and why the limit moved.
// A limit that keeps falling with reason "throttled" is API Priority and
// Fairness rejecting the controller; with "latency", the API server
// queueing.
var (
	concurrencyLimit = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_concurrency_limit",
		Help: "How many syncs and Event writes may be in flight at once (adaptive; --workers is its ceiling).",
	})
	concurrencyInUse = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_concurrency_in_use",
		Help: "Syncs and Event writes in flight.",
	})
	concurrencyChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_concurrency_limit_changes_total",
		Help: "Changes of the concurrency limit, by reason (slow_start, increase, throttled, latency).",
	}, []string{"reason"})
)

func concurrencyCollectors() []prometheus.Collector {
	return []prometheus.Collector{concurrencyLimit, concurrencyInUse, concurrencyChanges}
}

// SetConcurrency records the limit and the slots in use.
func SetConcurrency(limit, inUse int) {
	concurrencyLimit.Set(float64(limit))
	concurrencyInUse.Set(float64(inUse))
}

// RecordConcurrencyChange counts one change of the limit.
func RecordConcurrencyChange(reason string, limit int) {
	concurrencyChanges.WithLabelValues(reason).Inc()
	concurrencyLimit.Set(float64(limit))
}
