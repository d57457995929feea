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
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestSharedInformerQueuesARealFIFO proves: a shared informer's queue
// "is a `RealFIFO`", atomic, observed through a real
// SharedIndexInformer rather than by constructing the FIFO: the queue
// length it reports (its metrics, so the informer has a name) and the
// order its handler is called in.
//
//   - A list of three objects is one queued item, a `ReplacedAll`: the
//     queue-length gauge goes 1, then 0. A `DeltaFIFO`, or a `RealFIFO`
//     without `AtomicEvents`, would queue one item per object: 3.
//   - While the informer's one consumer is held inside a cache write (an
//     index function that waits), three watch events for two objects
//     (b, c, b again) make the queue 3 long: every event is its own
//     item. A `DeltaFIFO` counts keys, and would say 2. That they can be
//     queued at all while the consumer works is `UnlockWhileProcessing`:
//     a `DeltaFIFO` holds its lock while the consumer processes, and the
//     reflector would wait.
//   - Released, the handler is called in arrival order: b, c, b. A
//     `DeltaFIFO` hands out b's two changes together: b, b, c.
func TestSharedInformerQueuesARealFIFO(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a", "b", "c") // resourceVersions 1, 2, 3
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	p, rec := &metricsRecorder{}, &recorder{}
	inf := cache.NewSharedIndexInformerWithOptions(s.lw(), &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{
		Identifier:              informerName(t).WithResource(configMapsGVR),
		InformerMetricsProvider: p,
		Indexers: cache.Indexers{"hold": func(obj interface{}) ([]string, error) {
			// The consumer writes the cache; this runs inside that write.
			if obj.(*corev1.ConfigMap).Data["v"] == "hold" {
				holdOnce.Do(func() { close(held); <-release })
			}
			return nil, nil
		}},
	})
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)

	if got := p.queued.snapshot(); !slices.Equal(got, []float64{1, 0}) {
		t.Errorf("the initial list of 3 objects made the queue %v long in turn, want [1 0]: one ReplacedAll", got)
	}
	waitFor(t, "the three initial adds", func() bool { return rec.len() == 3 })
	rec.take()

	s.set("a", "hold", true) // resourceVersion 4: the consumer stops inside its cache write
	<-held
	s.set("b", "x", true) // 5
	s.set("c", "x", true) // 6
	s.set("b", "y", true) // 7
	waitFor(t, "three events queued behind the held consumer", func() bool {
		v, ok := p.queued.last()
		return ok && v == 3
	})
	close(release)

	waitFor(t, "four updates", func() bool { return rec.len() == 4 })
	var got []string
	for _, e := range rec.take() {
		got = append(got, e.Name+"@"+e.RV)
	}
	if want := []string{"a@4", "b@5", "c@6", "b@7"}; !slices.Equal(got, want) {
		t.Errorf("the handler saw %v, want %v: every event, in arrival order", got, want)
	}

	// A relist is one item too.
	before := len(p.queued.snapshot())
	s.expire()
	waitFor(t, "the relist to be queued and popped", func() bool {
		l, _ := s.counts()
		return l == 2 && len(p.queued.snapshot()) >= before+2 && inf.LastSyncResourceVersion() == "7"
	})
	if got := p.queued.snapshot()[before:]; !slices.Equal(got, []float64{1, 0}) {
		t.Errorf("the relist of 3 objects made the queue %v long in turn, want [1 0]: one ReplacedAll", got)
	}
}
