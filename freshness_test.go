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
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

type fakeRVStore struct{ rv string }

func (s *fakeRVStore) LastStoreSyncResourceVersion() string { return s.rv }

// TestWriteTracker: the tracker NewController builds waits on exactly
// the whole Deployment cache and the Bar cache (trackedStores), never on
// the metadata-only cache, which the controller's writes never reach; a
// sync waits until each of them has read every write the Bar made; an
// older answer does not lower the mark; a recreated Bar starts afresh.
func TestWriteTracker(t *testing.T) {
	f := newFixture(t)
	c := f.newController(context.Background())
	whole := f.kubeInformers.Apps().V1().Deployments().Informer().GetIndexer()
	meta := f.deploymentMeta.Informer().GetIndexer()
	if got := c.writes.stores; len(got) != 2 || len(got["deployments"]) != 1 || len(got["bars"]) != 1 ||
		got["deployments"][0] != rvStore(whole) || got["bars"][0] != rvStore(c.barsIndexer) {
		t.Fatalf("NewController's tracker waits on %v, want the whole Deployment cache and the Bar cache alone", got)
	}
	for _, s := range c.writes.stores["deployments"] {
		if s == rvStore(meta) {
			t.Fatal("NewController's tracker waits on the metadata-only cache, which never reads the controller's writes")
		}
	}

	// The same registration, over stores whose versions the test sets; the
	// metadata cache stays behind throughout and never holds a sync back.
	deployments, deploymentMeta, bars := &fakeRVStore{rv: "100"}, &fakeRVStore{rv: "100"}, &fakeRVStore{rv: "100"}
	tr := newWriteTracker(trackedStores(deployments, bars))
	key := cache.ObjectName{Namespace: "default", Name: "test"}
	var stale *staleCacheError

	if err := tr.caughtUp(key); err != nil {
		t.Fatalf("no writes yet: %v", err)
	}
	tr.wrote(key, "uid-1", "deployments", "105")
	tr.wrote(key, "uid-1", "bars", "107")
	tr.wrote(key, "uid-1", "deployments", "103") // an older answer must not lower the mark
	if err := tr.caughtUp(key); !errors.As(err, &stale) {
		t.Fatalf("caches at 100 after writes at 105/107: got %v, want a staleCacheError", err)
	}
	deployments.rv = "104"
	bars.rv = "1000" // longer numbers are larger, not lexically smaller
	if err := tr.caughtUp(key); !errors.As(err, &stale) || stale.resource != "deployments" || stale.wrote != "105" {
		t.Fatalf("the Deployment cache at 104, below the 105 written (103 came later): got %v, want deployments stale at 105", err)
	}
	deployments.rv = "105"
	if err := tr.caughtUp(key); err != nil {
		t.Fatalf("the caches written to caught up, the metadata cache at %s: %v", deploymentMeta.rv, err)
	}
	if len(tr.writes) != 0 {
		t.Errorf("caught-up Bars must be forgotten, still tracking %v", tr.writes)
	}

	// A new Bar with the same name does not inherit the old one's writes.
	tr.wrote(key, "uid-1", "deployments", "2000")
	tr.wrote(key, "uid-2", "bars", "900")
	if err := tr.caughtUp(key); err != nil {
		t.Errorf("after the Bar was recreated: %v", err)
	}

	// Resource versions that do not compare (an empty cache) never block.
	tr.wrote(key, "uid-2", "bars", "5000")
	bars.rv = ""
	if err := tr.caughtUp(key); err != nil {
		t.Errorf("with an unreadable cache version: %v", err)
	}

	tr.wrote(key, "uid-2", "bars", "9000")
	tr.forget(key)
	if err := tr.caughtUp(key); err != nil {
		t.Errorf("after forget: %v", err)
	}
}

// TestNewestDeploymentNeverActsOnTheOlderCopy: in every state the two
// Deployment caches can be in for one name (either copy or none; three
// versions; one Deployment or two namesakes; controlled by the Bar or
// not; labelled, so in the full cache, or not, so in the metadata one),
// the copy the sync acts on, and so judges drift and the Ready condition
// on, is never older than the metadata cache's copy of the same
// Deployment: the sync either acts on the newer copy or waits. Status is
// judged from the newer copy as ownership is (issue 39 asked whether the
// older full copy could make Ready=True; it cannot while the metadata
// cache holds the newer one).
func TestNewestDeploymentNeverActsOnTheOlderCopy(t *testing.T) {
	bar := newBar("test", "web", 2)
	haves := []*appsv1.Deployment{nil}
	metas := []metav1.Object{nil}
	for _, rv := range []string{"10", "20", "30"} {
		for _, uid := range []types.UID{"one", "namesake"} {
			for _, owned := range []bool{true, false} {
				d := ownedDeployment(bar)
				d.ResourceVersion, d.UID = rv, uid
				if !owned {
					d.OwnerReferences = nil
				}
				haves = append(haves, d)
				unlabelled := d.DeepCopy()
				delete(unlabelled.Labels, managedByLabel)
				m, err := trimDeploymentMetadata(&metav1.PartialObjectMetadata{ObjectMeta: unlabelled.ObjectMeta})
				if err != nil {
					t.Fatal(err)
				}
				metas = append(metas, m.(metav1.Object))
			}
		}
	}
	for _, have := range haves {
		for _, meta := range metas {
			_, acts, err := newestDeployment(bar, have, meta)
			if err != nil || acts == nil || meta == nil || acts.UID != meta.GetUID() {
				continue
			}
			if cmp, _ := compareRVs(acts.ResourceVersion, meta.GetResourceVersion()); cmp < 0 {
				t.Errorf("the sync acts on the full copy at resourceVersion %s though the metadata cache holds %s of the same Deployment",
					acts.ResourceVersion, meta.GetResourceVersion())
			}
		}
	}
}
