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
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// The two Deployment caches (the full one of managed Deployments, the
// metadata one of every other) deliver independently, so while a label is
// added or removed both may hold a version of one Deployment, or neither.
// These tests put the caches in such states, which the other unit tests
// never do (they fill each cache as main.go's selectors split them).

// TestNewestDeployment: which copy the sync believes, or whether it waits.
func TestNewestDeployment(t *testing.T) {
	bar := newBar("test", "web", 2)
	ours := func(rv string) *appsv1.Deployment {
		d := ownedDeployment(bar)
		d.ResourceVersion = rv
		return d
	}
	taken := func(rv string) *appsv1.Deployment {
		d := ours(rv)
		d.OwnerReferences = nil
		return d
	}
	unlabelled := func(rv string) *appsv1.Deployment {
		d := ours(rv)
		delete(d.Labels, managedByLabel)
		return d
	}
	unlabelledTaken := func(rv string) *appsv1.Deployment {
		d := taken(rv)
		delete(d.Labels, managedByLabel)
		return d
	}
	namesake := func(rv string) *appsv1.Deployment {
		d := ours(rv)
		d.UID = types.UID("namesake-uid")
		return d
	}
	unlabelledNamesake := func(rv string) *appsv1.Deployment {
		d := namesake(rv)
		delete(d.Labels, managedByLabel)
		return d
	}
	meta := func(d *appsv1.Deployment) metav1.Object {
		m, err := trimDeploymentMetadata(&metav1.PartialObjectMetadata{ObjectMeta: d.ObjectMeta})
		if err != nil {
			t.Fatal(err)
		}
		return m.(metav1.Object)
	}
	const (
		fromFull = "full"
		fromMeta = "metadata"
		none     = "none"
		wait     = "wait"
	)
	for _, tc := range []struct {
		name   string
		have   *appsv1.Deployment
		meta   metav1.Object
		holder string // which copy holds the name, or wait
		acts   bool   // the sync may act on the full copy
	}{
		// None, or one whose label changes, read first by the cache it
		// leaves: a create fails with AlreadyExists and is retried.
		{"neither cache holds it", nil, nil, none, false},
		{"a managed Deployment, in the full cache alone", ours("20"), nil, fromFull, true},
		{"ownerReference removed, label kept: in the full cache alone", taken("25"), nil, fromFull, true},
		// Someone put the label back: the full cache read it, the
		// metadata cache has yet to read it leave.
		{"the label put back, full cache first", ours("25"), meta(unlabelled("20")), fromFull, true},
		// The race of issue 27: someone removes the ownerReference and
		// the label together, and the metadata cache reads it first.
		{"ownerReference and label removed, metadata cache first", ours("20"), meta(unlabelledTaken("25")), fromMeta, false},
		// The label removed alone: the Deployment is still the Bar's, and
		// the full cache has yet to read it leave; drift judged on the
		// full copy would be judged on the older word.
		{"the label removed, full cache yet to read it", ours("20"), meta(unlabelled("25")), wait, false},
		{"the full cache holds a namesake that is gone", namesake("15"), meta(unlabelled("20")), fromMeta, false},
		{"the metadata cache holds a namesake that is gone", ours("20"), meta(unlabelledNamesake("15")), fromFull, true},
		// The full cache read the label's removal as a delete, and will
		// never read this Deployment again: act on the metadata copy.
		{"the label removed", nil, meta(unlabelled("25")), fromMeta, false},
		{"the label removed, and changed since", nil, meta(unlabelled("31")), fromMeta, false},
		{"someone else's, in metadata only", nil, meta(unlabelledTaken("25")), fromMeta, false},
		// main.go's selector keeps a labelled Deployment out of the
		// metadata cache; should one get there, the sync waits for the
		// full cache rather than put back a label it has.
		{"labelled, in metadata only (the selector prevents it)", nil, meta(ours("25")), wait, false},
		{"versions that do not compare (fakes)", ours(""), meta(unlabelled("")), fromMeta, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder, have, err := newestDeployment(bar, tc.have, tc.meta)
			var stale *staleCacheError
			got := none
			switch {
			case errors.As(err, &stale):
				got = wait
				if holder != nil || have != nil {
					t.Errorf("a wait returned a holder %v or a Deployment %v", holder, have)
				}
			case err != nil:
				t.Fatal(err)
			case holder == nil:
			case holder == metav1.Object(tc.have):
				got = fromFull
			case holder == tc.meta:
				got = fromMeta
			default:
				t.Fatalf("holder %v is neither copy", holder)
			}
			if got != tc.holder {
				t.Errorf("holder from %s (%v), want %s", got, err, tc.holder)
			}
			if acts := have != nil; acts != tc.acts {
				t.Errorf("the sync may act on the full copy: %v, want %v", acts, tc.acts)
			}
		})
	}
}

// TestRemovedOwnerReferenceIsNotWrittenBack: a Deployment someone took away
// from the Bar is reported and left alone: with the labels kept, as the
// full cache reads it; with the managed-by label removed too, as the
// metadata cache reads it while the full cache still holds the Bar's copy.
// Before, the stale copy made the sync force an apply that put the
// reference back.
func TestRemovedOwnerReferenceIsNotWrittenBack(t *testing.T) {
	msg := "Deployment web already exists with no controller, so this Bar does not manage it; " +
		"delete or rename that Deployment, or choose another spec.deployment.name"
	for _, fullFirst := range []bool{true, false} {
		name := "label removed too, metadata cache first"
		if fullFirst {
			name = "label kept, full cache alone"
		}
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			bar := withStatus(newBar("test", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
			d := ownedDeployment(bar)
			f.bars = append(f.bars, bar)
			f.deployments = append(f.deployments, d)
			c := f.newController(ctx)

			taken := d.DeepCopy()
			taken.ResourceVersion = "25"
			taken.OwnerReferences = nil
			// The API server drops a removed field from its manager's entry.
			takenBy(t, taken, "", fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", string(bar.UID))))
			if fullFirst {
				// The labels kept: the Deployment stays in the full cache.
				f.updateFullCache(t, taken)
			} else {
				// The label removed too: the metadata cache reads it
				// arrive before the full cache reads it leave.
				delete(taken.Labels, managedByLabel)
				f.updateMetadataCache(t, taken)
			}
			if err := c.syncHandler(ctx, keyOf(bar)); err != nil {
				t.Fatal(err)
			}
			checkActions(t, "kube", nil, f.kubeclient.Actions())
			checkActions(t, "bar", []core.Action{applyStatusAction(bar, 0, metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned, msg, fixedNow)}, f.client.Actions())
			checkEvents(t, []string{"Warning DeploymentNotOwned " + msg}, f.recorder.Events)
		})
	}
}

// TestChangeTheFullCacheHasNotReadWaits: when someone removes the label of
// the Bar's Deployment (and changes it) and the metadata cache reads that
// before the full cache reads it leave, the metadata cache holds a newer
// version than the full one; drift judged on the full copy would be judged
// on the older word: the sync waits.
func TestChangeTheFullCacheHasNotReadWaits(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
	d := ownedDeployment(bar)
	d.Spec.Replicas = ptr.To[int32](5) // looks drifted in the full cache
	takenBy(t, d, "kubectl", replicasPath)
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, d)
	c := f.newController(ctx)
	newer := d.DeepCopy()
	newer.ResourceVersion = "25"
	delete(newer.Labels, managedByLabel)
	f.updateMetadataCache(t, newer)

	err := c.syncHandler(ctx, keyOf(bar))
	var stale *staleCacheError
	if !errors.As(err, &stale) {
		t.Fatalf("syncHandler: %v, want a stale cache", err)
	}
	checkActions(t, "kube", nil, f.kubeclient.Actions())
	checkActions(t, "bar", nil, f.client.Actions())
	checkEvents(t, nil, f.recorder.Events)
}

func (f *fixture) updateFullCache(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if err := f.kubeInformers.Apps().V1().Deployments().Informer().GetIndexer().Update(d); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) updateMetadataCache(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	m, err := trimDeploymentMetadata(&metav1.PartialObjectMetadata{ObjectMeta: d.ObjectMeta})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.deploymentMeta.Informer().GetIndexer().Update(m); err != nil {
		t.Fatal(err)
	}
}
