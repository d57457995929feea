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
	"math"
	"sort"
	"sync"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The work queue's own view of a churn phase, from the controller's
// metrics: what its keys waited (workqueue_queue_duration_seconds) and
// how deep it got (workqueue_depth). Both the product and the
// controller-runtime peer name their queue "bars".
var benchQueue = map[string]string{"name": "bars"}

// histogram is the cumulative bucket counts of one histogram, by upper
// bound (the +Inf bucket is the sample count).
type histogram map[float64]float64

func scrapeQueue(metricsURL, token string) (histogram, error) {
	m, err := localcluster.Scrape(loopbackClient(), metricsURL, token)
	if err != nil {
		return nil, err
	}
	h := histogram{}
	f := m["workqueue_queue_duration_seconds"]
	if f == nil {
		return h, nil
	}
	var count float64
next:
	for _, metric := range f.GetMetric() {
		for _, l := range metric.GetLabel() {
			if want, ok := benchQueue[l.GetName()]; ok && l.GetValue() != want {
				continue next
			}
		}
		hist := metric.GetHistogram()
		for _, b := range hist.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the text format may list it: the count below is it
				h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		count += float64(hist.GetSampleCount())
	}
	h[math.Inf(1)] = count
	return h, nil
}

func (h histogram) minus(before histogram) histogram {
	d := histogram{}
	for le, n := range h {
		d[le] = n - before[le]
	}
	return d
}

// quantile is Prometheus's histogram_quantile: the bucket the rank falls
// in, linearly within it. One in the +Inf bucket is reported as the
// largest finite bound.
func (h histogram) quantile(q float64) time.Duration {
	var bounds []float64
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || h[math.Inf(1)] == 0 {
		return 0
	}
	rank := q * h[math.Inf(1)]
	lower, below := 0.0, 0.0
	for _, le := range bounds {
		if h[le] >= rank {
			if math.IsInf(le, 1) {
				return seconds(lower)
			}
			if h[le] == below {
				return seconds(le)
			}
			return seconds(lower + (le-lower)*(rank-below)/(h[le]-below))
		}
		lower, below = le, h[le]
	}
	return seconds(lower)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// sampleDepth samples the queue's depth every churnSample until the
// returned function is called, which returns the deepest seen.
func sampleDepth(ctx context.Context, metricsURL, token string) func() float64 {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		deepest float64
		done    = make(chan struct{})
	)
	client := loopbackClient()
	go func() {
		defer close(done)
		t := time.NewTicker(churnSample)
		defer t.Stop()
		for {
			if m, err := localcluster.Scrape(client, metricsURL, token); err == nil {
				v, _ := m.Value("workqueue_depth", benchQueue)
				mu.Lock()
				deepest = max(deepest, v)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return deepest
	}
}
