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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
)

// Write-tracker entries (freshness.go) end with their Bar.

// A Bar being deleted (a finalizer holds it) is never written again: its
// sync forgets what the tracker held for it, and asks for nothing.
func TestSyncOfDeletedBarForgetsItsWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	bar.DeletionTimestamp = &fixedNow
	bar.Finalizers = []string{"example.com/hold"}
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	c.writes = newWriteTracker(map[string][]rvStore{"bars": {&fakeRVStore{rv: "100"}}})
	c.writes.wrote(keyOf(bar), bar.UID, "bars", "105") // its watch event not in yet

	if err := c.syncHandler(ctx, keyOf(bar)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, "kube", nil, f.kubeclient.Actions())
	checkActions(t, "bar", nil, f.client.Actions())
	if n := len(c.writes.writes); n != 0 {
		t.Errorf("the tracker still holds %d Bars after the deleted Bar's sync: %v", n, c.writes.writes)
	}
}

// A Bar deleted while the tracker holds a write of it, with no sync of it
// pending (its last sync is done, and the write's own event was handled
// before the cache... or never came): the delete itself must lead to the
// sync that forgets it. Informers, handlers and queue run for real on fake
// clients; the test plays the workers, so it knows when nothing is queued.
func TestDeletedBarIsForgotten(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.newController(ctx)
	bar := newBar("test", "web", 1)
	if err := f.client.Tracker().Add(bar); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		c.queue.ShutDown()
		f.shutdownInformers()
	}()
	f.startInformers(runCtx)
	if !c.waitForCaches(runCtx) {
		t.Fatal("caches never synced")
	}
	// Sync until nothing is queued (the Bar's add, then the events of what
	// its sync wrote).
	drain := func() {
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			for c.queue.Len() > 0 {
				c.processNextWorkItem(ctx, ctx)
			}
		}
	}
	drain()
	if _, err := c.deploymentsLister.Deployments("default").Get("web"); err != nil {
		t.Fatalf("the Bar was not synced: %v", err)
	}
	c.writes.wrote(keyOf(bar), bar.UID, "bars", "999999") // a write no cache has seen
	if err := f.client.BarcontrollerV1().Bars("default").Delete(ctx, "test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 3*time.Second, true, func(context.Context) (bool, error) {
		for c.queue.Len() > 0 {
			c.processNextWorkItem(ctx, ctx)
		}
		c.writes.mu.Lock()
		defer c.writes.mu.Unlock()
		return len(c.writes.writes) == 0, nil
	})
	if err != nil {
		t.Errorf("3 s after the Bar was deleted the tracker still holds %v", c.writes.writes)
	}
}
