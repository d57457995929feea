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

	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/adaptive"
	"github.com/barcontroller/bar-controller/internal/metrics"
)

// slots bound the work in flight against the API server: a sync holds one
// from the moment its worker took its key until the queue is told how it
// went, an Event write for its request. Syncs and Event writes share them,
// because they share the API server's seats: under API Priority and
// Fairness, Event writes that nothing bounds take the seats the syncs need
// (docs/measurements.md).
type slots interface {
	Acquire(ctx context.Context) error
	Release()
}

// fixedSlots is a fixed number of slots (--adaptive-concurrency=false,
// and the Event writes of a controller that has no other slots).
type fixedSlots chan struct{}

func newFixedSlots(n int) fixedSlots { return make(fixedSlots, n) }

func (s fixedSlots) Acquire(ctx context.Context) error {
	// Checked first: a select with a free slot and an ended ctx may pick
	// either, and work whose ctx ended must not start.
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s fixedSlots) Release() { <-s }

// Concurrency is how the limit starts and where it stops.
const (
	// initialConcurrency is the fixed number the controller had before
	// the adaptive limit: where API Priority and Fairness rejects the
	// controller from its first request, the limit starts no higher than
	// what converged there (test/faults).
	initialConcurrency = 4
	// minConcurrency is that number too, because below it the limit
	// works against itself: client-go waits out each 429's Retry-After
	// (a second or more) inside the request, and the sync or Event write
	// waiting holds its slot all the while. With one slot, one rejection
	// stopped all work for that second: 500 Bars under a one-seat
	// priority level took 4.5 minutes where the fixed 4 took 19 s
	// (make bench, docs/measurements.md).
	minConcurrency = 4
)

// newAdaptiveSlots returns slots whose number follows the API server
// (internal/adaptive), from initialConcurrency up to ceiling; its
// Transport method wraps the clients whose answers it learns from. Each
// change is a metric and a -v=2 log line.
func newAdaptiveSlots(logger klog.Logger, ceiling int) *adaptiveSlots {
	s := &adaptiveSlots{}
	s.Limiter = adaptive.New(adaptive.Config{
		Min: minConcurrency, Max: ceiling, Initial: initialConcurrency,
		// What the syncs and their Event writes write, in the slots.
		// Every client main builds from the configuration Transport
		// wraps carries it, the metrics endpoint's reviews and the
		// webhook certificate keeper's writes too: their answers are no
		// measure of the syncs' cost.
		Resources: []string{"deployments", "bars", "events"},
		OnChange: func(c adaptive.Change) {
			metrics.RecordConcurrencyChange(c.Reason, c.To)
			logger.V(2).Info("Concurrency limit changed", "from", c.From, "to", c.To, "reason", c.Reason,
				"answers", c.Samples, "slow", c.Slow, "rejected", c.Throttled)
		},
	})
	metrics.SetConcurrency(s.Limit(), 0)
	return s
}

type adaptiveSlots struct {
	*adaptive.Limiter
}

func (s *adaptiveSlots) Acquire(ctx context.Context) error {
	if err := s.Limiter.Acquire(ctx); err != nil {
		return err
	}
	metrics.SetConcurrency(s.Limit(), s.InUse())
	return nil
}

func (s *adaptiveSlots) Release() {
	s.Limiter.Release()
	metrics.SetConcurrency(s.Limit(), s.InUse())
}

// UseSlots makes every sync, and every Event write, hold one of s while it
// runs (concurrency.go): the workers are then a ceiling, and s says how
// much of it the API server gets. Call it before Run.
func (c *Controller) UseSlots(s slots) {
	c.slots = s
	c.eventSink.slots = s
}
