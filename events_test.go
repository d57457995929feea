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
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/klog/v2/ktesting"
)

// blockingSink counts the writes in flight and holds each until released.
type blockingSink struct {
	inFlight, most atomic.Int32
	release        chan struct{}
}

func (s *blockingSink) write() (*eventsv1.Event, error) {
	n := s.inFlight.Add(1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	<-s.release
	s.inFlight.Add(-1)
	return &eventsv1.Event{}, nil
}

func (s *blockingSink) Create(context.Context, *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write()
}
func (s *blockingSink) Update(context.Context, *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write()
}
func (s *blockingSink) Patch(context.Context, *eventsv1.Event, []byte) (*eventsv1.Event, error) {
	return s.write()
}

// TestLimitedSink: however many events are written at once, at most the
// limit reach the API server together, and a write that waits for a slot
// gives up with its context.
func TestLimitedSink(t *testing.T) {
	inner := &blockingSink{release: make(chan struct{})}
	sink := newLimitedSink(inner, newFixedSlots(3))
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			var err error
			switch i % 3 {
			case 0:
				_, err = sink.Create(context.Background(), &eventsv1.Event{})
			case 1:
				_, err = sink.Update(context.Background(), &eventsv1.Event{})
			default:
				_, err = sink.Patch(context.Background(), &eventsv1.Event{}, nil)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for inner.inFlight.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a fourth, were the limit broken

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sink.Create(ctx, &eventsv1.Event{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a write waiting for a slot returned %v, want its context's error", err)
	}
	close(inner.release)
	wg.Wait()
	if most := inner.most.Load(); most != 3 {
		t.Errorf("%d writes in flight at most, want 3", most)
	}
}

// The flush of Events at a graceful shutdown waits for the writes in flight
// and returns once there are none; with writes that never end, it gives up
// at its bound.
func TestLimitedSinkWaitIdle(t *testing.T) {
	s := newLimitedSink(&blockingSink{release: make(chan struct{})}, newFixedSlots(2))
	if err := s.waitIdle(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatalf("an unused sink is idle: %v", err)
	}
	bs := s.sink.(*blockingSink)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Create(context.Background(), &eventsv1.Event{})
	}()
	for s.active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.waitIdle(ctx, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with a write in flight: %v, want the deadline", err)
	}
	close(bs.release)
	<-done
	start := time.Now()
	if err := s.waitIdle(context.Background(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("idle after %v, want the quiet period (50ms) after the last write", d)
	}
}

// TestLogEvents: a Deployment created is logged from -v=2; a repair and
// a Warning at the default verbosity.
func TestLogEvents(t *testing.T) {
	for _, tc := range []struct {
		verbosity int
		want      []string
	}{
		{0, []string{EventDeploymentUpdated, EventDeploymentNotOwned}},
		{2, []string{EventDeploymentCreated, EventDeploymentUpdated, EventDeploymentNotOwned}},
	} {
		t.Run(fmt.Sprintf("v=%d", tc.verbosity), func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(tc.verbosity), ktesting.BufferLogs(true)))
			log := eventLogger(logger)
			all := []struct{ typ, reason string }{
				{corev1.EventTypeNormal, EventDeploymentCreated},
				{corev1.EventTypeNormal, EventDeploymentUpdated},
				{corev1.EventTypeWarning, EventDeploymentNotOwned},
			}
			for _, e := range all {
				log(&eventsv1.Event{Type: e.typ, Reason: e.reason, Action: actionSync, Note: "a note",
					Regarding: corev1.ObjectReference{Kind: "Bar", Namespace: "default", Name: "web"}})
			}
			buffer := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			var got []string
			for _, e := range all {
				if strings.Contains(buffer, `reason="`+e.reason+`"`) {
					got = append(got, e.reason)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("logged %v, want %v:\n%s", got, tc.want, buffer)
			}
		})
	}
}
