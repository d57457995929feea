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

// Package metrics exposes bar-controller's own metrics and client-go's
// (work queue, REST client, leader election) in the Prometheus text format.
package metrics

import (
	"context"
	"net/http"
	"net/http/pprof"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Metrics, in the Prometheus text format on --metrics-bind-address/metrics.
// client-go measures the work queue, the REST client and leader election
// through provider interfaces and does not depend on any metrics library;
// the adapters below plug Prometheus collectors into those interfaces.

// Sync results, the "result" label of the sync metrics.
const (
	SyncSuccess = "success"
	SyncError   = "error"
	// SyncStale: the sync waited for the cache to catch up (freshness.go).
	SyncStale = "stale_cache"
)

var (
	syncsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_syncs_total",
		Help: "Syncs of a Bar, by result (success, error, stale_cache).",
	}, []string{"result"})
	syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bar_controller_sync_duration_seconds",
		Help:    "How long one sync of a Bar took, by result.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. 13s
	}, []string{"result"})

	workqueueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "workqueue_depth", Help: "Current depth of the work queue.",
	}, []string{"name"})
	workqueueAdds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workqueue_adds_total", Help: "Keys added to the work queue.",
	}, []string{"name"})
	workqueueLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "workqueue_queue_duration_seconds", Help: "How long a key waits in the work queue before a worker takes it.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10),
	}, []string{"name"})
	workqueueWorkDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "workqueue_work_duration_seconds", Help: "How long processing one key takes.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10),
	}, []string{"name"})
	workqueueUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "workqueue_unfinished_work_seconds",
		Help: "Seconds of work in progress that no metric has observed yet; large values mean stuck workers.",
	}, []string{"name"})
	workqueueLongestRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "workqueue_longest_running_processor_seconds", Help: "How long the longest-running worker has been working on its key.",
	}, []string{"name"})
	workqueueRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workqueue_retries_total", Help: "Keys re-added with a delay (AddAfter): the backoff after a failed sync, and the short wait after a stale cache.",
	}, []string{"name"})

	requestLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_request_duration_seconds", Help: "API server request latency, by verb and host.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"verb", "host"})
	rateLimiterLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_rate_limiter_duration_seconds", Help: "Time requests waited for the client-side rate limiter (--kube-api-qps).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"verb", "host"})
	requestResults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total", Help: "API server requests, by status code, method and host.",
	}, []string{"code", "method", "host"})

	leaderStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status", Help: "1 while this process holds the named lease, else 0.",
	}, []string{"name"})
)

// NewRegistry registers every collector, and plugs them into client-go.
// Call it once, before the first client or work queue is created.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		syncsTotal, syncDuration,
		workqueueDepth, workqueueAdds, workqueueLatency, workqueueWorkDuration,
		workqueueUnfinished, workqueueLongestRunning, workqueueRetries,
		requestLatency, rateLimiterLatency, requestResults,
		leaderStatus,
	)
	reg.MustRegister(authCollectors()...)
	reg.MustRegister(conversionCollectors()...)
	reg.MustRegister(listenerCollectors()...)
	reg.MustRegister(certificateCollector{})
	reg.MustRegister(concurrencyCollectors()...)
	reg.MustRegister(shardCollectors()...)
	workqueue.SetProvider(workqueueMetrics{})
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestLatency:     latencyAdapter{requestLatency},
		RateLimiterLatency: latencyAdapter{rateLimiterLatency},
		RequestResult:      resultAdapter{},
	})
	leaderelection.SetProvider(leaderMetrics{})
	return reg
}

// RecordSync counts one sync of a Bar and how long it took.
func RecordSync(result string, d time.Duration) {
	syncsTotal.WithLabelValues(result).Inc()
	syncDuration.WithLabelValues(result).Observe(d.Seconds())
}

// Syncs is what bar_controller_syncs_total says so far for a result, in
// this process: the controller's tests read it before and after a sync to
// tell how it was counted, as an operator's dashboard would. Reading a
// result starts its series at 0, as RecordSync's first count would.
func Syncs(result string) (float64, error) {
	var m dto.Metric
	if err := syncsTotal.WithLabelValues(result).Write(&m); err != nil {
		return 0, err
	}
	return m.GetCounter().GetValue(), nil
}

type workqueueMetrics struct{}

func (workqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return workqueueDepth.WithLabelValues(name)
}
func (workqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return workqueueAdds.WithLabelValues(name)
}
func (workqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return workqueueLatency.WithLabelValues(name)
}
func (workqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return workqueueWorkDuration.WithLabelValues(name)
}
func (workqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return workqueueUnfinished.WithLabelValues(name)
}
func (workqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return workqueueLongestRunning.WithLabelValues(name)
}
func (workqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return workqueueRetries.WithLabelValues(name)
}

type latencyAdapter struct{ h *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.h.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type resultAdapter struct{}

func (resultAdapter) Increment(_ context.Context, code, method, host string) {
	requestResults.WithLabelValues(code, method, host).Inc()
}

type leaderMetrics struct{}

func (leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return leaderMetrics{} }
func (leaderMetrics) On(name string)                               { leaderStatus.WithLabelValues(name).Set(1) }
func (leaderMetrics) Off(name string)                              { leaderStatus.WithLabelValues(name).Set(0) }
func (leaderMetrics) SlowpathExercised(string)                     {}

// Handler serves the registry in the Prometheus text format at /metrics
// and, with profiling, the Go runtime's profiles under /debug/pprof/, as
// kube-controller-manager does on its secure port. The profiles answer what
// the metrics cannot, such as which objects hold the heap
// (docs/measurements/benchmarks-memory-and-50000-bars.md has a heap profile of
// 5,000 Bars); on the secure endpoint only callers allowed to get the
// non-resource URL, e.g. /debug/pprof/heap, reach them.
func Handler(reg *prometheus.Registry, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if profiling {
		// Index serves the named profiles (heap, goroutine, allocs, ...);
		// the CPU profile, the execution trace and symbol lookup have
		// handlers of their own.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
