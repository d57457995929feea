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
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/adaptive"
	"github.com/barcontroller/bar-controller/internal/metrics"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// This file is the loop: Run waits for the caches and starts the workers;
// each worker takes a key from the queue, syncs it and tells the queue how
// it went; the slots at the end bound how many of them reach the API
// server at once.

// Run waits for the caches, then syncs Bars with the given number of workers
// until ctx or shutdown ends, and returns once no sync runs and no Event is
// being written. Run can be called once.
//
// Both stop the work, but they end it differently, because they mean
// different things:
//
//   - shutdown ending is a graceful stop (SIGTERM): no new sync starts, and
//     the syncs in progress finish, their Events included. Cutting a sync
//     off between its apply and its status write would leave both for the
//     next start, and the Event of the apply would never be written.
//   - ctx ending means the controller may no longer write at all: its
//     leader Lease is lost (internal/leader), and another replica may be
//     writing already. ctx is the context of every API call the syncs and
//     the Event writers make, so each one in progress is cancelled at once,
//     and no queued Event is written: a late write could undo the new
//     leader's.
//
// Without leader election nothing takes the right to write away, and ctx
// does not end before shutdown.
func (c *Controller) Run(ctx, shutdown context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)

	// stop ends with either: the end of handing out work.
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(shutdown, cancel)()
	stopEvents, err := c.recordEvents(ctx)
	if err != nil {
		return err
	}
	defer stopEvents()

	logger.Info("Starting Bar controller", "workers", workers)
	logger.Info("Waiting for informer caches to sync")
	if !c.waitForCaches(stop) {
		// Only the end of stop ends the wait: a shutdown, not a failure.
		c.queue.ShutDown()
		logger.Info("Shut down before the caches synced")
		return nil
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.runWorker(ctx, stop) })
	}
	logger.Info("Started workers")
	<-stop.Done()
	if ctx.Err() != nil {
		logger.Info("Shutting down: no longer allowed to write; cancelling the syncs in progress")
	} else {
		logger.Info("Shutting down: finishing syncs in progress")
	}
	c.queue.ShutDown() // wakes idle workers
	wg.Wait()
	logger.Info("Shut down workers")
	return nil
}

// waitForCaches waits for the informers' first lists and reports true once
// all are in, false if ctx ends first. While it waits it says every
// cacheWaitReport which caches are missing and why. client-go does not: its
// WatchList reflector retries a refused connection and logs it only at -v=2
// (the isErrorRetriableWithSideEffectsFn of Reflector.watchList,
// tools/cache/reflector.go), so the controller asks the API server itself,
// with one discovery request, whether it answers and serves Bars.
func (c *Controller) waitForCaches(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	caches := []struct {
		name   string
		synced cache.InformerSynced
	}{{"bars", c.barsSynced}, {"deployments", c.deploymentsSynced}, {"deployment metadata", c.deploymentMetaSynced}}
	nextReport := time.Now().Add(cacheWaitReport)
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		var missing []string
		for _, cache := range caches {
			if !cache.synced() {
				missing = append(missing, cache.name)
			}
		}
		if len(missing) == 0 {
			return true, nil
		}
		if time.Now().After(nextReport) {
			nextReport = time.Now().Add(cacheWaitReport)
			gv := barv1.SchemeGroupVersion.String()
			// With a context: a shutdown must not wait for this answer.
			askCtx, cancel := context.WithTimeout(ctx, discoveryTimeout)
			_, err := c.kubeclientset.Discovery().ServerResourcesForGroupVersionWithContext(askCtx, gv)
			cancel()
			switch {
			case ctx.Err() != nil: // shutting down: no question left to answer
			case apierrors.IsNotFound(err):
				logger.Info("Caches not synced: the API server does not serve "+gv+"; is the Bar CRD installed? (kubectl apply -f artifacts/crd)", "waitingFor", missing)
			case err != nil:
				logger.Info("Caches not synced: cannot reach the API server", "waitingFor", missing, "err", err)
			default:
				logger.Info("Caches not synced yet", "waitingFor", missing)
			}
		}
		return false, nil
	})
	if err == nil {
		logger.Info("Caches are synced")
	}
	return err == nil
}

// runWorker syncs Bars until stop ends; ctx is that of the syncs' API
// calls (see Run).
func (c *Controller) runWorker(ctx, stop context.Context) {
	for c.processNextWorkItem(ctx, stop) {
	}
}

// processNextWorkItem is the dequeue step: take one key, sync it, and tell
// the queue how it went. It returns false when the worker should stop.
func (c *Controller) processNextWorkItem(ctx, stop context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	c.trace.dequeued(key, c.queue.NumRequeues(key))
	if stop.Err() != nil {
		// Shutting down: a queued key is not "in progress". It will be
		// synced again from the caches after the next start.
		return false
	}

	if c.slots != nil {
		// Taken after the key, not before: a worker waiting for work
		// must not hold a slot an Event write could use. Until the slot
		// comes, the key stays in progress, and an add for it waits.
		if err := c.slots.Acquire(stop); err != nil {
			// Shutting down, as above.
			return false
		}
		defer c.slots.Release()
	}

	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	start := time.Now()
	err := c.syncHandler(syncCtx, key)
	var stale *staleCacheError
	switch {
	case err == nil:
		metrics.RecordSync(metrics.SyncSuccess, time.Since(start))
		c.trace.synced(key, start, metrics.SyncSuccess, nil)
		c.queue.Forget(key)
	case errors.As(err, &stale):
		// Not a failure: the informer is a few milliseconds behind.
		metrics.RecordSync(metrics.SyncStale, time.Since(start))
		c.trace.synced(key, start, metrics.SyncStale, err)
		klog.FromContext(ctx).V(4).Info("Waiting for the cache to catch up", "bar", key, "reason", err)
		// A short fixed wait, not AddRateLimited: the informer is
		// expected to catch up within milliseconds, and the rate limiter's
		// backoff and shared bucket are the retry budget of failures. A
		// cold start of thousands of Bars has thousands of these, which
		// would empty the bucket and delay every real retry after them.
		c.queue.AddAfter(key, staleRetryDelay)
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		// A precondition failed (the Deployment changed since the cache
		// showed it), or a create found the name taken (freshness.go).
		// The caches are behind the API server, not broken; the retry
		// judges what they show next. Rate-limited, not the stale wait's
		// fixed 50 ms: each try is a request.
		metrics.RecordSync(metrics.SyncStale, time.Since(start))
		c.trace.synced(key, start, metrics.SyncStale, err)
		klog.FromContext(ctx).V(2).Info("The API server is ahead of the caches; retrying", "bar", key, "reason", err)
		c.queue.AddRateLimited(key)
	case ctx.Err() != nil:
		// Cancelled because the controller may no longer write (Run):
		// not a failure of this Bar, and nothing to retry here.
		c.trace.synced(key, start, metrics.SyncError, err)
	default:
		metrics.RecordSync(metrics.SyncError, time.Since(start))
		c.trace.synced(key, start, metrics.SyncError, err)
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing Bar; will retry", "bar", key)
		c.queue.AddRateLimited(key)
	}
	return true
}

// slots bound the work in flight against the API server: a sync holds one
// from the moment its worker took its key until the queue is told how it
// went, an Event write for its request. Syncs and Event writes share them,
// because they share the API server's seats: under API Priority and
// Fairness, Event writes that nothing bounds take the seats the syncs need
// (docs/measurements/benchmarks-converge-and-concurrency.md).
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
	// (make bench, docs/measurements/benchmarks-converge-and-concurrency.md).
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
// runs (above): the workers are then a ceiling, and s says how
// much of it the API server gets. Call it before Run.
func (c *Controller) UseSlots(s slots) {
	c.slots = s
	c.eventSink.slots = s
}
