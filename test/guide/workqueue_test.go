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
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// TestQueueCollapsesAWaitingKey proves: "`Typed.Add`: a key already in
// `dirty` is dropped — that is the *collapsing* the trace shows".
func TestQueueCollapsesAWaitingKey(t *testing.T) {
	q := workqueue.NewTyped[string]()
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	if n := q.Len(); n != 2 {
		t.Errorf("queue holds %d keys, want 2", n)
	}
}

// TestQueueNeverHandsOutAKeyBeingProcessed proves: "one key is never
// synced by two workers at once, and any number of events during a sync
// cause exactly one more sync".
func TestQueueNeverHandsOutAKeyBeingProcessed(t *testing.T) {
	q := workqueue.NewTyped[string]()
	defer q.ShutDown()
	q.Add("a")
	k, _ := q.Get()
	q.Add(k)
	q.Add(k)
	q.Add(k)
	if n := q.Len(); n != 0 {
		t.Fatalf("while a is processed the queue hands out %d keys, want 0", n)
	}
	q.Done(k)
	if n := q.Len(); n != 1 {
		t.Fatalf("after Done the queue holds %d keys, want exactly 1 more sync of a", n)
	}
}

// TestDefaultControllerRateLimiter proves: `DefaultTypedControllerRateLimiter`
// "is the maximum of a per-item exponential backoff (5 ms doubling to
// 1,000 s) and an overall token bucket (10 per second, burst 100)", and
// `Forget` resets the item's backoff.
func TestDefaultControllerRateLimiter(t *testing.T) {
	// In a synctest bubble the bucket's clock (time.Now, through
	// golang.org/x/time/rate) stands still while the test runs, so no
	// token comes back between the calls and the waits are exact.
	synctest.Test(t, func(t *testing.T) {
		rl := workqueue.DefaultTypedControllerRateLimiter[string]()
		want := 5 * time.Millisecond
		for i := range 30 {
			if d := rl.When("a"); d != min(want, 1000*time.Second) {
				t.Fatalf("failure %d of a waits %v, want %v", i+1, d, min(want, 1000*time.Second))
			}
			want *= 2
		}
		rl.Forget("a")
		if d := rl.When("a"); d != 5*time.Millisecond {
			t.Errorf("after Forget a waits %v, want 5ms", d)
		}
		// The bucket: 100 other keys' first failures pass (the burst, less
		// the 31 tokens a took), then each costs a tenth of a second more.
		var last time.Duration
		for i := range 100 {
			last = rl.When(string(rune('b' + i)))
		}
		if last != 3100*time.Millisecond {
			t.Errorf("the 131st retry of the bucket waits %v, want 3.1s (31 over the burst of 100, at 10 per second)", last)
		}
	})
}

// TestShutDownDrainsTheQueue proves: after `ShutDown`, `Typed.Get` goes
// on handing out the keys still queued, and answers shutdown=true only
// once the queue is empty; not syncing them is the caller's choice.
func TestShutDownDrainsTheQueue(t *testing.T) {
	q := workqueue.NewTyped[string]()
	q.Add("a")
	q.Add("b")
	q.ShutDown()
	var got []string
	for {
		key, shutdown := q.Get()
		if shutdown {
			break
		}
		got = append(got, key)
		q.Done(key)
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("after ShutDown Get handed out %v, want a and b, then shutdown", got)
	}
}

// queueMetricsAsked is a workqueue.MetricsProvider that counts how often
// a queue asks it for a metric; every metric it hands out is a no-op.
type queueMetricsAsked struct{ n int }

type noopMetric struct{}

func (noopMetric) Inc()                                                  {}
func (noopMetric) Dec()                                                  {}
func (noopMetric) Set(float64)                                           {}
func (noopMetric) Observe(float64)                                       {}
func (p *queueMetricsAsked) NewDepthMetric(string) workqueue.GaugeMetric { p.n++; return noopMetric{} }
func (p *queueMetricsAsked) NewAddsMetric(string) workqueue.CounterMetric {
	p.n++
	return noopMetric{}
}
func (p *queueMetricsAsked) NewLatencyMetric(string) workqueue.HistogramMetric {
	p.n++
	return noopMetric{}
}
func (p *queueMetricsAsked) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	p.n++
	return noopMetric{}
}
func (p *queueMetricsAsked) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	p.n++
	return noopMetric{}
}
func (p *queueMetricsAsked) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	p.n++
	return noopMetric{}
}
func (p *queueMetricsAsked) NewRetriesMetric(string) workqueue.CounterMetric {
	p.n++
	return noopMetric{}
}

// TestUnnamedQueueMeasuresNothing proves: a queue without a `Name` in
// its config never asks its metrics provider for a metric; with one, it
// asks for all seven (the queue's six and the delaying queue's retries).
func TestUnnamedQueueMeasuresNothing(t *testing.T) {
	for _, name := range []string{"", "bars"} {
		p := &queueMetricsAsked{}
		q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name, MetricsProvider: p})
		q.AddRateLimited("a")
		q.ShutDown()
		if want := map[string]int{"": 0, "bars": 7}[name]; p.n != want {
			t.Errorf("queue named %q asked its provider for %d metrics, want %d", name, p.n, want)
		}
	}
}
