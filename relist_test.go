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

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// listOnly is a ListWatch that, like the fake clientsets, does not offer
// WatchList, so the reflector lists.
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// TestRelistDeliversUnchangedObjectsAsUpdates pins what
// docs/writing-handlers.md says about a relist: an object that did not
// change comes to the handlers again, as an update whose old and new
// resourceVersions are equal, even on an informer without a resync period
// (the metadata-only Deployment informer's configuration). updateDeployment
// drops such updates (TestDeploymentResyncIsIgnored).
func TestRelistDeliversUnchangedObjectsAsUpdates(t *testing.T) {
	var mu sync.Mutex
	var watchers []*watch.FakeWatcher
	var updates [][2]string
	lw := listOnly{&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &appsv1.DeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []appsv1.Deployment{
				{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "5"}},
			}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			mu.Lock()
			defer mu.Unlock()
			watchers = append(watchers, w)
			return w, nil
		},
	}}
	informer := cache.NewSharedIndexInformer(lw, &appsv1.Deployment{}, 0, cache.Indexers{})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj interface{}) {
			mu.Lock()
			defer mu.Unlock()
			updates = append(updates, [2]string{oldObj.(*appsv1.Deployment).ResourceVersion, newObj.(*appsv1.Deployment).ResourceVersion})
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the cache did not sync")
	}
	// The server has compacted past the watch: 410 Gone ends the round, and
	// the next one lists everything again.
	var w *watch.FakeWatcher
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(watchers) > 0 {
			w = watchers[0]
		}
		return w != nil, nil
	}); err != nil {
		t.Fatal("no watch was opened")
	}
	w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(updates) > 0, nil
	}); err != nil {
		t.Fatal("the relist delivered no update for the unchanged Deployment")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := updates[0]; got != [2]string{"5", "5"} {
		t.Errorf("update resourceVersions %s -> %s, want 5 -> 5", got[0], got[1])
	}
}
