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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// TestSlotsBoundSyncsBelowWorkers drives the whole loop with 4 workers and
// 2 slots: never more than 2 syncs are inside an API call at once, and
// every Bar still gets its Deployment and its status.
func TestSlotsBoundSyncsBelowWorkers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	const bars = 8
	for i := range bars {
		f.bars = append(f.bars, newBar(fmt.Sprintf("bar-%d", i), fmt.Sprintf("web-%d", i), 1))
	}
	c := f.newController(ctx)
	slots := newFixedSlots(2)
	c.UseSlots(slots)
	if c.eventSink.slots != slots {
		t.Fatal("UseSlots did not give the Event writes the same slots")
	}

	var inFlight, most atomic.Int32
	busy := func(core.Action) (bool, runtime.Object, error) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		inFlight.Add(-1)
		return false, nil, nil // on to the fake's own handling
	}
	f.kubeclient.PrependReactor("patch", "deployments", busy)
	f.kubeclient.PrependReactor("create", "deployments", busy)
	f.client.PrependReactor("patch", "bars", busy)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.startInformers(runCtx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, runCtx, 4) }()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := f.kubeclient.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == bars, nil
	})
	if err != nil {
		t.Fatalf("not every Bar got its Deployment: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	f.shutdownInformers()
	if m := most.Load(); m > 2 {
		t.Errorf("%d API calls of syncs in flight at once with 2 slots", m)
	}
	if m := most.Load(); m < 2 {
		t.Errorf("at most %d API call in flight: the 2 slots were never both used (the test shows nothing)", m)
	}
}
