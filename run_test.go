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
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// TestRunFinishesSyncInProgressOnShutdown drives the whole loop (informers,
// handlers, queue, workers) on fake clients, and cancels Run's context while
// a sync is blocked inside an API call. Run must wait for that sync, and the
// sync must go on to its status write. (Fake clients ignore contexts, so
// that the sync's requests are not cancelled with Run's context is checked
// against a real API server in the integration tests.)
func TestRunFinishesSyncInProgressOnShutdown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(entered) })
		<-release
		return false, nil, nil // go on to the fake's own apply
	})

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.startInformers(runCtx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, runCtx, 2) }()

	select {
	case <-entered:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no sync reached the Deployment apply")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a sync was still in progress", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Run did not return after the sync finished")
	}

	if _, err := f.kubeclient.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the interrupted sync did not create its Deployment: %v", err)
	}
	var statusWritten bool
	for _, a := range f.client.Actions() {
		statusWritten = statusWritten || (a.GetVerb() == "patch" && a.GetSubresource() == "status")
	}
	if !statusWritten {
		t.Errorf("the interrupted sync did not write the Bar's status; requests: %v", f.client.Actions())
	}
	f.shutdownInformers()
}

// TestRunWritesEventsOfSyncsFinishedDuringShutdown: a sync that a graceful
// shutdown lets finish reports its Event too, through the real broadcaster,
// before Run returns. (test/faults TestSIGTERMFinishesSyncWithItsEvent
// shows the same against a real API server, with the real signal.)
func TestRunWritesEventsOfSyncsFinishedDuringShutdown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	c.recorder = c.newRecorder() // the fixture's is a fake

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(entered) })
		<-release
		return false, nil, nil
	})
	shutdown, stop := context.WithCancel(ctx)
	defer stop()
	informerCtx, stopInformers := context.WithCancel(ctx)
	f.startInformers(informerCtx)
	defer f.shutdownInformers()
	defer stopInformers() // runs first
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, shutdown, 2) }()
	select {
	case <-entered:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no sync reached the Deployment apply")
	}
	stop()
	time.Sleep(100 * time.Millisecond) // Run has seen the shutdown
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Run did not return after the sync finished")
	}
	for _, a := range f.kubeclient.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			if ev := a.(core.CreateAction).GetObject().(*eventsv1.Event); ev.Reason == EventDeploymentCreated {
				return
			}
		}
	}
	t.Errorf("no DeploymentCreated Event written by the time Run returned; requests: %v", f.kubeclient.Actions())
}
