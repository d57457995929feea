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
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// writtenEvents is an events.EventSink that writes down each write,
// with the series count it carries, and the time it was made at.
type writtenEvents struct {
	mu     sync.Mutex
	start  time.Time
	writes []string
}

func (s *writtenEvents) note(verb string, e *eventsv1.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	count := int32(1)
	if e.Series != nil {
		count = e.Series.Count
	}
	s.writes = append(s.writes, fmt.Sprintf("%s count=%d at %v", verb, count, time.Since(s.start).Truncate(time.Second)))
}

func (s *writtenEvents) Create(_ context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.note("create", e)
	return e, nil
}

func (s *writtenEvents) Update(_ context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.note("update", e)
	return e, nil
}

func (s *writtenEvents) Patch(_ context.Context, e *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	s.note("patch", e)
	return e, nil
}

func (s *writtenEvents) taken() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.writes
	s.writes = nil
	return out
}

// TestEventSeriesAggregateUntilTheSweep proves, in a synctest bubble
// whose clock the broadcaster reads: a repeat of an Event becomes a
// series on the first; the second occurrence is written (count 2), later
// ones only raise the cached count; the sweep every six minutes writes
// the series once it has been quiet six minutes (here at 12 min, the
// last repeat at 1.5 min: the sweep at 6 min finds it 4.5 minutes quiet),
// and forgets it, so that the next repeat is a new Event.
func TestEventSeriesAggregateUntilTheSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &writtenEvents{start: time.Now()}
		b := events.NewBroadcaster(sink)
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); b.Shutdown(); synctest.Wait() }()
		must(t, b.StartRecordingToSinkWithContext(ctx))
		rec := b.NewRecorder(scheme.Scheme, "guide")
		cm := configMap("a", 1, "x")
		emit := func() {
			rec.Eventf(cm, nil, "Normal", "Seen", "Look", "seen again")
			synctest.Wait()
		}

		emit()
		time.Sleep(time.Minute)
		emit()
		emit()
		time.Sleep(30 * time.Second)
		emit()
		if got, want := sink.taken(), []string{"create count=1 at 0s", "patch count=2 at 1m0s"}; !slices.Equal(got, want) {
			t.Errorf("four occurrences wrote %v, want %v: the third and fourth only counted", got, want)
		}
		time.Sleep(12*time.Minute - 90*time.Second + time.Second) // just past the sweep at 12 min
		synctest.Wait()
		if got, want := sink.taken(), []string{"patch count=4 at 12m0s"}; !slices.Equal(got, want) {
			t.Errorf("the sweeps wrote %v, want %v: nothing at 6 min, the series at 12", got, want)
		}
		emit()
		if got, want := sink.taken(), []string{"create count=1 at 12m1s"}; !slices.Equal(got, want) {
			t.Errorf("after the sweep a repeat wrote %v, want %v", got, want)
		}
	})
}

// TestEventBroadcasterDropsPastAWatchersThousand proves: each watcher of
// tools/events' broadcaster has a queue of 1,000, and what does not fit
// while the watcher is busy is dropped: a watcher held in its first
// event gets, once released, 1,000 more of 1,100.
func TestEventBroadcasterDropsPastAWatchersThousand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := events.NewBroadcaster(&writtenEvents{start: time.Now()})
		release := make(chan struct{})
		var mu sync.Mutex
		handled := 0
		stop, err := b.StartEventWatcher(func(runtime.Object) {
			mu.Lock()
			first := handled == 0
			handled++
			mu.Unlock()
			if first {
				<-release
			}
		})
		must(t, err)
		rec := b.NewRecorder(scheme.Scheme, "guide")
		for i := range 1100 {
			rec.Eventf(configMap(fmt.Sprintf("n%d", i), 1, "x"), nil, "Normal", "Seen", "Look", "one of many")
		}
		synctest.Wait() // every event handed over, the watcher held in the first
		close(release)
		synctest.Wait()
		mu.Lock()
		got := handled
		mu.Unlock()
		if got != 1001 {
			t.Errorf("the held watcher handled %d of 1,100 events, want 1,001: the one it held and its queue of 1,000", got)
		}
		stop()
		b.Shutdown()
		synctest.Wait()
	})
}
