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

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// The controller's own CPU per Bar, step by step (issue 30). A cold start
// of one Bar is a first sync (desired Deployment, create, status write),
// the new Deployment's watch events (one per Deployment informer, which
// the work queue usually folds into one sync that finds it as wanted) and
// the status write's event of the Bar (one more such sync); a resync is
// that no-op sync again. Compare runs with benchstat:
//
//	go test -run '^$' -bench 'DesiredDeployment|FirstSync|NoOpSync|DeploymentEvent' -count 6 -benchmem .

// BenchmarkDesiredDeployment is what every sync of a Bar with a managed
// Deployment computes before it can compare: the apply configuration and
// its hash; and what a first sync adds: the object its create sends.
func BenchmarkDesiredDeployment(b *testing.B) {
	bar := newBar("test", "web", 2)
	b.Run("apply configuration", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if newDeployment(bar).Annotations[desiredHashAnnotation] == "" {
				b.Fatal("no hash")
			}
		}
	})
	b.Run("create object", func(b *testing.B) {
		want := newDeployment(bar)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := deploymentObject(want); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFirstSync is the sync of a new Bar: nothing in the caches, so
// a create and a status write. The fake API answers both without storing
// anything, so every iteration is a first sync again; its own cost (the
// actions it records, copies) is part of the number, the same before and
// after a change.
func BenchmarkFirstSync(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	bar := newBar("web", "web", 2)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	c.recorder = &events.FakeRecorder{} // no channel: events go nowhere
	answer := func(action core.Action) (bool, runtime.Object, error) {
		switch a := action.(type) {
		case core.CreateAction:
			return true, a.GetObject(), nil
		case core.PatchAction:
			return true, bar, nil
		}
		return false, nil, nil
	}
	f.kubeclient.PrependReactor("create", "deployments", answer)
	f.client.PrependReactor("patch", "bars", answer)
	key := keyOf(bar)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.syncHandler(ctx, key); err != nil {
			b.Fatal(err)
		}
		f.kubeclient.ClearActions()
		f.client.ClearActions()
	}
}

// BenchmarkNoOpSync is the sync of a converged Bar, as every resync and
// every watch event that changed nothing the Bar cares about runs it: no
// API request.
func BenchmarkNoOpSync(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	bar := withStatus(newBar("web", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, ownedDeployment(bar))
	c := f.newController(ctx)
	key := keyOf(bar)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.syncHandler(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
	if n := len(f.kubeclient.Actions()) + len(f.client.Actions()); n != 0 {
		b.Fatalf("a no-op sync made %d API requests", n)
	}
}

// BenchmarkDeploymentEvent is the handler of a managed Deployment's watch
// event (its status moved, say): look up the Bars it matters to and
// enqueue them. The transform before it is BenchmarkTrimDeployment.
func BenchmarkDeploymentEvent(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	bar := newBar("web", "web", 2)
	f.bars = append(f.bars, bar)
	d := ownedDeployment(bar)
	f.deployments = append(f.deployments, d)
	c := f.newController(ctx)
	newer := d.DeepCopy()
	newer.ResourceVersion = "21"
	var deployments []*appsv1.Deployment
	deployments = append(deployments, d, newer)
	b.ReportAllocs()
	for b.Loop() {
		c.updateDeployment(deployments[0], deployments[1])
		key, _ := c.queue.Get()
		c.queue.Done(key)
	}
}
