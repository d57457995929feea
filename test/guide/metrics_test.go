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

package guide

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiserverfeatures "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
)

// series is one metric as a provider handed it out: every value it was
// set to (a gauge) or observed (a histogram), in order.
type series struct {
	mu     sync.Mutex
	values []float64
}

func (s *series) Set(v float64)     { s.add(v) }
func (s *series) Observe(v float64) { s.add(v) }

func (s *series) add(v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values = append(s.values, v)
}

func (s *series) snapshot() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.values)
}

func (s *series) last() (float64, bool) {
	v := s.snapshot()
	if len(v) == 0 {
		return 0, false
	}
	return v[len(v)-1], true
}

// metricsRecorder is a cache.InformerMetricsProvider that writes down
// which metrics an informer asked it for, and what they were given.
type metricsRecorder struct {
	mu      sync.Mutex
	made    []string // "queued configmaps", "latency configmaps", "store configmaps"
	queued  series   // the FIFO's length after every change
	latency series   // seconds per popped item or batch
	storeRV series   // the store's resourceVersion after every write
}

func (p *metricsRecorder) note(what string, id cache.InformerNameAndResource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.made = append(p.made, what+" "+id.GroupVersionResource().Resource)
}

func (p *metricsRecorder) madeSoFar() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.made)
}

func (p *metricsRecorder) NewQueuedItemMetric(id cache.InformerNameAndResource) cache.GaugeMetric {
	p.note("queued", id)
	return &p.queued
}

func (p *metricsRecorder) NewProcessingLatencyMetric(id cache.InformerNameAndResource) cache.HistogramMetric {
	p.note("latency", id)
	return &p.latency
}

func (p *metricsRecorder) NewStoreResourceVersionMetric(id cache.InformerNameAndResource) cache.GaugeMetric {
	p.note("store", id)
	return &p.storeRV
}

// metricsInformer is a shared informer of s's ConfigMaps that reports
// to p under id (the zero id: no name), with rec as its handler.
func metricsInformer(t *testing.T, s *fakeServer, id cache.InformerNameAndResource, p *metricsRecorder, rec *recorder) cache.SharedIndexInformer {
	t.Helper()
	inf := cache.NewSharedIndexInformerWithOptions(s.lw(), &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{
		Identifier:              id,
		InformerMetricsProvider: p,
	})
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	return inf
}

// informerName reserves a process-wide unique informer name for the
// test, and gives it back when the test ends.
func informerName(t *testing.T) *cache.InformerName {
	t.Helper()
	n, err := cache.NewInformerName("guide-" + t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Release)
	return n
}

// TestInformerMetricsNeedAName proves: "an informer reports its metrics
// only when it has a name": with an `InformerNameAndResource` from
// `(*InformerName).WithResource` the informer asks its provider for the
// queue-length gauge, the processing-latency histogram and the store's
// resourceVersion gauge, and keeps them current; without one (the zero
// value `NewSharedIndexInformer` uses) it asks the same provider for
// nothing; and a second informer registering the same name and resource
// gets none either.
func TestInformerMetricsNeedAName(t *testing.T) {
	t.Parallel()
	name := informerName(t)

	// Named: the three metrics, kept current.
	named, namedRec := &metricsRecorder{}, &recorder{}
	s := newFakeServer("a", "b") // resourceVersions 1 and 2
	runInformer(t, metricsInformer(t, s, name.WithResource(configMapsGVR), named, namedRec))
	s.set("a", "v1", true) // resourceVersion 3
	waitFor(t, "the named informer's store resourceVersion gauge at 3", func() bool {
		v, ok := named.storeRV.last()
		return ok && v == 3
	})
	want := []string{"latency configmaps", "queued configmaps", "store configmaps"}
	if got := named.madeSoFar(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("the named informer asked for %v, want %v", got, want)
	}
	// One popped list, one popped update: two latency observations at least.
	if n := len(named.latency.snapshot()); n < 2 {
		t.Errorf("the named informer observed %d processing latencies, want at least 2", n)
	}
	if v, ok := named.queued.last(); !ok || v != 0 {
		t.Errorf("the named informer's queue gauge is %v (set: %v), want 0 once everything is popped", v, ok)
	}

	// Unnamed: the same provider is never asked, although the informer
	// did the same work (the handler saw the list and the update).
	unnamed, unnamedRec := &metricsRecorder{}, &recorder{}
	s2 := newFakeServer("a", "b")
	runInformer(t, metricsInformer(t, s2, cache.InformerNameAndResource{}, unnamed, unnamedRec))
	s2.set("a", "v1", true)
	waitFor(t, "the unnamed informer's handler to see the update", func() bool { return unnamedRec.len() == 3 })
	if got := unnamed.madeSoFar(); len(got) != 0 {
		t.Errorf("the unnamed informer asked for metrics: %v", got)
	}

	// The same name and resource again: the first registration keeps the
	// metrics, the second gets none.
	dup, dupRec := &metricsRecorder{}, &recorder{}
	s3 := newFakeServer("a")
	runInformer(t, metricsInformer(t, s3, name.WithResource(configMapsGVR), dup, dupRec))
	if got := dup.madeSoFar(); len(got) != 0 {
		t.Errorf("a second informer with the same name and resource asked for metrics: %v", got)
	}
}

// countingReflectorMetrics is a cache.MetricsProvider that counts how
// often it is asked for a metric, of any kind.
type countingReflectorMetrics struct{ asked atomic.Int64 }

type noMetric struct{}

func (noMetric) Inc()            {}
func (noMetric) Set(float64)     {}
func (noMetric) Observe(float64) {}

func (c *countingReflectorMetrics) ask() noMetric { c.asked.Add(1); return noMetric{} }

func (c *countingReflectorMetrics) NewListsMetric(string) cache.CounterMetric { return c.ask() }
func (c *countingReflectorMetrics) NewListDurationMetric(string) cache.SummaryMetric {
	return c.ask()
}
func (c *countingReflectorMetrics) NewItemsInListMetric(string) cache.SummaryMetric {
	return c.ask()
}
func (c *countingReflectorMetrics) NewWatchesMetric(string) cache.CounterMetric { return c.ask() }
func (c *countingReflectorMetrics) NewShortWatchesMetric(string) cache.CounterMetric {
	return c.ask()
}
func (c *countingReflectorMetrics) NewWatchDurationMetric(string) cache.SummaryMetric {
	return c.ask()
}
func (c *countingReflectorMetrics) NewItemsInWatchMetric(string) cache.SummaryMetric {
	return c.ask()
}
func (c *countingReflectorMetrics) NewLastResourceVersionMetric(string) cache.GaugeMetric {
	return c.ask()
}

// reflectorMetrics is installed once per test binary: client-go takes
// the first provider only, so a second run of the test (-count) reads
// the same counter.
var (
	reflectorMetrics        = &countingReflectorMetrics{}
	installReflectorMetrics sync.Once
)

// TestReflectorMetricsProviderIsNeverAsked proves: "`SetReflectorMetricsProvider`
// is accepted and never used": a named informer lists, watches, relists
// after a 410 and watches again, and the reflector metrics provider is
// asked for no metric, by this informer or any other running meanwhile.
func TestReflectorMetricsProviderIsNeverAsked(t *testing.T) {
	t.Parallel()
	installReflectorMetrics.Do(func() { cache.SetReflectorMetricsProvider(reflectorMetrics) })
	p, rec := &metricsRecorder{}, &recorder{}
	s := newFakeServer("a")
	runInformer(t, metricsInformer(t, s, informerName(t).WithResource(configMapsGVR), p, rec))
	s.set("a", "v1", true)
	waitFor(t, "the update", func() bool { return rec.len() == 2 })
	s.expire()
	waitFor(t, "a relist and a second watch", func() bool { l, w := s.counts(); return l == 2 && w == 2 })
	if n := reflectorMetrics.asked.Load(); n != 0 {
		t.Errorf("reflectors asked their metrics provider %d times, want 0", n)
	}
	// The informer metrics of the same informer did work meanwhile.
	if len(p.madeSoFar()) != 3 {
		t.Errorf("the informer metrics were not made (%v): the test did not exercise a named informer", p.madeSoFar())
	}
}

// TestConsistentListFromCacheGateIsGone proves: the API server of
// v0.37.2 knows no ConsistentListFromCache gate (its
// ConsistentListFromCacheSkipTimeoutFallback aside), so a consistent list
// is served from the watch cache whenever etcd can say how far it is; and
// it knows its WatchList and ListFromCacheSnapshot gates, each beta and
// on by default.
func TestConsistentListFromCacheGateIsGone(t *testing.T) {
	all := utilfeature.DefaultFeatureGate.DeepCopy().GetAll()
	if _, ok := all["ConsistentListFromCache"]; ok {
		t.Error("the API server still knows a ConsistentListFromCache gate")
	}
	if spec, ok := all[apiserverfeatures.WatchList]; !ok || !spec.Default || spec.PreRelease != "BETA" {
		t.Errorf("the API server's WatchList gate: %+v (known %v), want beta and on by default", spec, ok)
	}
	if spec, ok := all[apiserverfeatures.ListFromCacheSnapshot]; !ok || !spec.Default || spec.PreRelease != "BETA" {
		t.Errorf("the API server's ListFromCacheSnapshot gate: %+v (known %v), want beta and on by default", spec, ok)
	}
}
