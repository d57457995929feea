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

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/tools/events"
)

// eventWriters is how many event writes may be in flight at once.
const eventWriters = 4

// limitedSink lets at most a fixed number of event writes reach the API
// server at once. tools/events writes every event from its own goroutine;
// during a cold start of thousands of Bars that is thousands of requests
// in flight. Where the API server answers with 429s (API Priority and
// Fairness), each of them retries after the Retry-After it is given, and
// together they keep the seats the syncs need: test/faults measured the
// controller no longer converging under a one-seat priority level. Events
// that wait here cost a goroutine each, not a request.
type limitedSink struct {
	sink  events.EventSink
	slots chan struct{}
}

func newLimitedSink(sink events.EventSink, n int) *limitedSink {
	return &limitedSink{sink: sink, slots: make(chan struct{}, n)}
}

func (s *limitedSink) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *limitedSink) release() { <-s.slots }

func (s *limitedSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.sink.Create(ctx, event)
}

func (s *limitedSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.sink.Update(ctx, event)
}

func (s *limitedSink) Patch(ctx context.Context, event *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.sink.Patch(ctx, event, data)
}
