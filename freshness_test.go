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
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

type fakeRVStore struct{ rv string }

func (s *fakeRVStore) LastStoreSyncResourceVersion() string { return s.rv }

func TestWriteTracker(t *testing.T) {
	// Deployments are read from two caches (whole and metadata-only).
	deployments, deploymentMeta, bars := &fakeRVStore{rv: "100"}, &fakeRVStore{rv: "100"}, &fakeRVStore{rv: "100"}
	tr := newWriteTracker(map[string][]rvStore{"deployments": {deployments, deploymentMeta}, "bars": {bars}})
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
	deployments.rv, deploymentMeta.rv = "105", "106"
	if err := tr.caughtUp(key); !errors.As(err, &stale) || stale.resource != "bars" {
		t.Fatalf("only the Deployment caches caught up: got %v, want bars to be stale", err)
	}
	bars.rv, deploymentMeta.rv = "1000", "100" // longer numbers are larger, not lexically smaller
	if err := tr.caughtUp(key); !errors.As(err, &stale) || stale.resource != "deployments" {
		t.Fatalf("one Deployment cache still behind: got %v, want deployments to be stale", err)
	}
	deploymentMeta.rv = "106"
	if err := tr.caughtUp(key); err != nil {
		t.Fatalf("all caches caught up: %v", err)
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
