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
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// A sync that finds a cache older than its own write waits a short fixed
// time and looks again. It is not a failure: it must not grow the key's
// backoff (NumRequeues) nor take from the rate limiter's shared bucket,
// which are for retrying failures.
func TestStaleCacheRequeueSpendsNoRetryBudget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	bars := &fakeRVStore{rv: "100"}
	c.writes = newWriteTracker(map[string][]rvStore{"bars": {bars}})
	key := keyOf(bar)
	c.writes.wrote(key, bar.UID, "bars", "105")
	defer c.queue.ShutDown()

	// Many times over: a key's exponential backoff would pass
	// staleRetryDelay within a few rounds.
	for round := range 8 {
		c.queue.Add(key)
		start := time.Now()
		if !c.processNextWorkItem(ctx, ctx) {
			t.Fatal("the worker stopped")
		}
		if n := c.queue.NumRequeues(key); n != 0 {
			t.Fatalf("round %d: NumRequeues = %d after a stale cache, want 0", round, n)
		}
		if n := c.queue.Len(); n != 0 && time.Since(start) < staleRetryDelay {
			t.Fatalf("round %d: key back in the queue before staleRetryDelay", round)
		}
		got, _ := c.queue.Get()
		if waited := time.Since(start); waited < staleRetryDelay || waited > staleRetryDelay+time.Second {
			t.Errorf("round %d: key back after %v, want %v", round, waited, staleRetryDelay)
		}
		c.queue.Done(got)
	}
	if n := len(f.kubeclient.Actions()); n != 0 {
		t.Fatalf("a sync with a stale cache made %d requests", n)
	}
	bars.rv = "105"
	c.queue.Add(key)
	c.processNextWorkItem(ctx, ctx)
	if n := len(f.kubeclient.Actions()); n == 0 {
		t.Errorf("caught up, yet the sync did not apply the Deployment")
	}
}

// A create that finds the name taken (neither Deployment cache holds a
// Deployment whose label is changing, freshness.go) means the caches are
// behind the API server, not that the Bar is broken: the key is retried
// through the rate limiter like a Conflict, as a failure's would be (each
// try is a request), but nothing is announced: no status, no Event.
func TestAlreadyExistsIsRetriedQuietly(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	defer c.queue.ShutDown()
	f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(appsv1.Resource("deployments"), "web")
	})
	key := keyOf(bar)
	syncs := func(result string) float64 {
		t.Helper()
		v, err := metrics.Syncs(result)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stale, failed := syncs(metrics.SyncStale), syncs(metrics.SyncError)

	c.queue.Add(key)
	if !c.processNextWorkItem(ctx, ctx) {
		t.Fatal("the worker stopped")
	}
	if n := c.queue.NumRequeues(key); n != 1 {
		t.Errorf("NumRequeues = %d after AlreadyExists, want 1 (rate-limited)", n)
	}
	// Counted as the caches being behind (BarControllerStaleCache fires
	// only when most syncs are), not as a failed sync
	// (BarControllerSyncErrors: artifacts/monitoring/prometheusrule.yaml).
	if got := syncs(metrics.SyncStale) - stale; got != 1 {
		t.Errorf("bar_controller_syncs_total{result=%q} grew by %v, want 1", metrics.SyncStale, got)
	}
	if got := syncs(metrics.SyncError) - failed; got != 0 {
		t.Errorf("bar_controller_syncs_total{result=%q} grew by %v, want 0", metrics.SyncError, got)
	}
	checkActions(t, "kube", []core.Action{createDeploymentAction(bar)}, f.kubeclient.Actions())
	checkActions(t, "bar", nil, f.client.Actions())
	checkEvents(t, nil, f.recorder.Events)
	// Told apart from a failure by what it logs: nothing an operator
	// must look at.
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, "The API server is ahead of the caches; retrying") || strings.Contains(logs, "Error syncing Bar") {
		t.Errorf("AlreadyExists logged as a failure, or not as a retry:\n%s", logs)
	}
}
