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
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

const (
	// eventWriters is how many event writes may be in flight at once
	// when the controller is given no slots to share with them
	// (UseSlots).
	eventWriters = 4
	// eventFlushTimeout bounds how long a graceful shutdown waits, after the
	// last sync, for the Events still being written.
	eventFlushTimeout = 5 * time.Second
	// eventQuiet is how long after the last Event was recorded, and the
	// last write started or ended, the flush counts them all as written.
	// tools/events passes each Event on through two goroutines of its own
	// (recorderImpl.eventf to the broadcaster, recordToSink to the sink),
	// each a matter of microseconds, but nothing says when they are done;
	// the margin covers a process the kernel throttles to its CPU limit
	// (CFS periods are 100 ms).
	eventQuiet = 250 * time.Millisecond
)

// logEvents logs every Event recorded. The one routine Event, a
// Deployment created for a new Bar, at -v=2, beside the controller's own
// line for that create; every other (a repair with what drifted, a
// delete, a Warning) at the default verbosity, as something a person
// should see. Logging all of them at the default verbosity, as the
// broadcaster's StartLogging does, was 2.5 % of the controller's CPU in a
// cold start of 5,000 Bars (one create Event per Bar). The line is
// StartLogging's.
func logEvents(b events.EventBroadcaster, logger klog.Logger) error {
	_, err := b.StartEventWatcher(eventLogger(logger))
	return err
}

func eventLogger(logger klog.Logger) func(runtime.Object) {
	return func(obj runtime.Object) {
		e, ok := obj.(*eventsv1.Event)
		if !ok {
			return
		}
		l := logger
		if e.Type == corev1.EventTypeNormal && e.Reason == EventDeploymentCreated {
			if l = logger.V(2); !l.Enabled() {
				return
			}
		}
		l.Info("Event occurred", "object", klog.KRef(e.Regarding.Namespace, e.Regarding.Name), "kind", e.Regarding.Kind,
			"apiVersion", e.Regarding.APIVersion, "type", e.Type, "reason", e.Reason, "action", e.Action, "note", e.Note)
	}
}

// recordEvents starts writing the recorded Events to the API server, with
// ctx: when ctx ends, the writes in progress are cancelled and no further
// one is made (see Run). stop ends recording. Unless ctx has ended, it
// first gives the Events already recorded up to eventFlushTimeout to be
// written: after a graceful shutdown, the Events of the syncs that were
// let finish are written too.
func (c *Controller) recordEvents(ctx context.Context) (stop func(), err error) {
	eventCtx, cancel := context.WithCancel(ctx)
	if err := c.broadcaster.StartRecordingToSinkWithContext(eventCtx); err != nil {
		cancel()
		return nil, fmt.Errorf("recording events: %w", err)
	}
	return func() {
		defer cancel()
		// Shut down only once the Events are written: the broadcaster
		// drops what reaches it after that.
		defer c.broadcaster.Shutdown()
		if ctx.Err() != nil {
			return
		}
		flushCtx, cancelFlush := context.WithTimeout(ctx, eventFlushTimeout)
		defer cancelFlush()
		if err := c.eventSink.waitIdle(flushCtx, eventQuiet); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Info("Gave up waiting for Events to be written", "waited", eventFlushTimeout, "inFlight", c.eventSink.active.Load())
		}
	}, nil
}

// newRecorder returns the controller's Event recorder: the broadcaster's,
// telling the sink of every Event recorded (see eventQuiet).
func (c *Controller) newRecorder() events.EventRecorder {
	return notingRecorder{EventRecorder: c.broadcaster.NewRecorder(scheme.Scheme, controllerAgentName), sink: c.eventSink}
}

type notingRecorder struct {
	events.EventRecorder
	sink *limitedSink
}

func (r notingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
	r.sink.changed.Store(time.Now().UnixNano())
}

// limitedSink lets event writes reach the API server only as slots allow
// (run.go: the syncs' own, or a fixed few). tools/events writes every event from its own goroutine;
// during a cold start of thousands of Bars that is thousands of requests
// in flight. Where the API server answers with 429s (API Priority and
// Fairness), each of them retries after the Retry-After it is given, and
// together they keep the seats the syncs need: test/faults measured the
// controller no longer converging under a one-seat priority level. Events
// that wait here cost a goroutine each, not a request.
type limitedSink struct {
	sink  events.EventSink
	slots slots

	// active counts the writes waiting for a slot or in flight; changed
	// is when it last changed or an Event was recorded (UnixNano), for
	// waitIdle.
	active  atomic.Int64
	changed atomic.Int64
}

func newLimitedSink(sink events.EventSink, slots slots) *limitedSink {
	return &limitedSink{sink: sink, slots: slots}
}

func (s *limitedSink) acquire(ctx context.Context) error { return s.slots.Acquire(ctx) }

func (s *limitedSink) release() { s.slots.Release() }

// track counts a write from its call to its return; call the result when it
// returns.
func (s *limitedSink) track() func() {
	s.active.Add(1)
	s.changed.Store(time.Now().UnixNano())
	return func() {
		s.active.Add(-1)
		s.changed.Store(time.Now().UnixNano())
	}
}

// waitIdle returns once no write has been waiting or in flight, and none
// started or ended nor an Event was recorded, for quiet; or ctx's error
// when ctx ends first.
func (s *limitedSink) waitIdle(ctx context.Context, quiet time.Duration) error {
	tick := time.NewTicker(quiet / 10)
	defer tick.Stop()
	for {
		if s.active.Load() == 0 && time.Since(time.Unix(0, s.changed.Load())) >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (s *limitedSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.track()()
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.sink.Create(ctx, event)
}

func (s *limitedSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.track()()
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.sink.Update(ctx, event)
}

func (s *limitedSink) Patch(ctx context.Context, event *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.track()()
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.sink.Patch(ctx, event, data)
}
