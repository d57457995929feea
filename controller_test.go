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
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// These tests follow upstream sample-controller: fake clientsets, informer
// caches filled by hand (no informer runs), one call to syncHandler, and an
// exact list of the API requests it made. The API server's own behaviour
// (admission, apply semantics, garbage collection) is tested against a real
// one elsewhere; here the question is only "what did the controller ask for".

// --- the tests ---

func TestCreatesDeployment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)

	f.kubeactions = append(f.kubeactions, createDeploymentAction(bar))
	// The fake API has no Deployment controller, so the new Deployment has
	// no replicas yet.
	f.actions = append(f.actions, applyStatusAction(bar, 0, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable,
		"waiting for Deployment web to have 1 available replicas (it has 0 replicas: 0 up to date, 0 available)", fixedNow))
	f.events = []string{"Normal DeploymentCreated Created Deployment web"}
	f.run(ctx, keyOf(bar))
}

func TestNoOpSyncMakesNoRequests(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 3), 3, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(3, 3, "web"))
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, ownedDeployment(bar))
	f.run(ctx, keyOf(bar)) // zero requests, zero events
}

// TestRepairsDrift: whatever someone changed among the fields the
// controller owns, one forced apply puts it back, and nothing else is sent.
// The API server moves a field another client changes to that client's
// manager (or, when it removes the field, to nobody); that is what the
// controller sees as drift (ownership.go).
func TestRepairsDrift(t *testing.T) {
	tests := []struct {
		name   string
		drift  func(*appsv1.Deployment)
		fields string // what the event says was put back
	}{
		{"replicas scaled by hand", func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](5)
			takenBy(t, d, "kubectl", replicasPath)
		}, "spec.replicas"},
		{"image changed", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0"
			takenBy(t, d, "kubectl-set", imagePath)
		}, "spec.template.spec.containers[app]"},
		{"label removed", func(d *appsv1.Deployment) {
			delete(d.Labels, managedByLabel)
			takenBy(t, d, "", fieldpath.MakePathOrDie("metadata", "labels", managedByLabel))
		}, "metadata.labels"},
		{"blockOwnerDeletion dropped", func(d *appsv1.Deployment) {
			d.OwnerReferences[0].BlockOwnerDeletion = nil
			takenBy(t, d, "kubectl-edit", fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", string(d.OwnerReferences[0].UID))))
		}, "metadata.ownerReferences"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			bar := withStatus(newBar("test", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
			d := ownedDeployment(bar)
			tc.drift(d)
			f.bars = append(f.bars, bar)
			f.deployments = append(f.deployments, d)

			f.kubeactions = append(f.kubeactions, applyDeploymentAction(bar, d))
			f.events = []string{"Normal DeploymentUpdated Updated Deployment web to match the Bar: " + tc.fields}
			f.run(ctx, keyOf(bar))
		})
	}
}

// TestLabelRemovalNeitherCacheHolds: the two Deployment caches select by
// the managed-by label, so when someone removes it from a Deployment of
// ours, the full cache drops it, and for a moment neither cache holds it.
// The sync then creates, and the API server answers AlreadyExists: the
// sync reports nothing (no status, no event) and is retried; once the
// metadata cache holds the Deployment, the label is put back.
func TestLabelRemovalNeitherCacheHolds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
	d := ownedDeployment(bar)
	d.ResourceVersion = "10"
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, d)
	c := f.newController(ctx)

	unlabelled := d.DeepCopy()
	unlabelled.ResourceVersion = "12"
	delete(unlabelled.Labels, managedByLabel)
	takenBy(t, unlabelled, "", fieldpath.MakePathOrDie("metadata", "labels", managedByLabel))
	if err := f.kubeclient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), unlabelled, unlabelled.Namespace); err != nil {
		t.Fatal(err)
	}
	if err := f.kubeInformers.Apps().V1().Deployments().Informer().GetIndexer().Delete(d); err != nil {
		t.Fatal(err)
	}
	err := c.syncHandler(ctx, keyOf(bar))
	if !apierrors.IsAlreadyExists(err) {
		t.Fatalf("syncHandler: %v, want AlreadyExists", err)
	}
	checkActions(t, "kube", []core.Action{createDeploymentAction(bar)}, f.kubeclient.Actions())
	checkActions(t, "bar", nil, f.client.Actions())
	checkEvents(t, nil, f.recorder.Events)

	f.kubeclient.ClearActions()
	f.updateMetadataCache(t, unlabelled)
	if err := c.syncHandler(ctx, keyOf(bar)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, "kube", []core.Action{applyDeploymentAction(bar, unlabelled)}, f.kubeclient.Actions())
	checkActions(t, "bar", nil, f.client.Actions())
	checkEvents(t, []string{"Normal DeploymentUpdated Updated Deployment web to match the Bar: metadata.labels"}, f.recorder.Events)
}

// TestAdmissionRewriteIsNotDrift: what mutating admission made of the
// controller's own apply stays the controller's in managedFields, so a
// resync sends nothing, where comparing values would re-apply forever.
func TestAdmissionRewriteIsNotDrift(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
	d := ownedDeployment(bar)
	d.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy", Image: "envoy:1.30"})
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, d)
	f.run(ctx, keyOf(bar)) // zero requests, zero events
}

// TestApplyThatChangesNothingIsNotAnnounced: when the API server already
// holds what the apply sends (someone put the values back first), the
// resourceVersion does not move, and no DeploymentUpdated event claims a
// change.
func TestApplyThatChangesNothingIsNotAnnounced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
	d := ownedDeployment(bar)
	d.Spec.Replicas = ptr.To[int32](5) // scaled in the cache; back to 2 on the server
	takenBy(t, d, "kubectl", replicasPath)
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, d)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", stampResourceVersion(f.kubeclient.Tracker(), d.ResourceVersion))
	if err := c.syncHandler(ctx, keyOf(bar)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, "kube", []core.Action{applyDeploymentAction(bar, d)}, f.kubeclient.Actions())
	checkEvents(t, nil, f.recorder.Events)
}

// TestLeavesForeignDeploymentAlone: a Deployment with no controller is
// reported, never written to, whether it carries the managed-by label (and
// so is in the full cache too) or not (only the metadata cache has it).
func TestLeavesForeignDeploymentAlone(t *testing.T) {
	for _, labelled := range []bool{true, false} {
		t.Run(fmt.Sprintf("labelled=%v", labelled), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			bar := newBar("test", "web", 1)
			foreign := ownedDeployment(bar)
			foreign.OwnerReferences = nil
			if !labelled {
				foreign.Labels = map[string]string{"app": "web"}
			}
			f.bars = append(f.bars, bar)
			f.deployments = append(f.deployments, foreign)

			msg := "Deployment web already exists with no controller, so this Bar does not manage it; " +
				"delete or rename that Deployment, or choose another spec.deployment.name"
			f.actions = append(f.actions, applyStatusAction(bar, 0, metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned, msg, fixedNow))
			f.events = []string{"Warning DeploymentNotOwned " + msg}
			f.run(ctx, keyOf(bar))
		})
	}
}

func TestForeignDeploymentIsNotHotLooped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	foreign := ownedDeployment(bar)
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Bar", Name: "test", UID: "other", Controller: ptr.To(true)}}
	msg := "Deployment web already exists with controller Bar test, so this Bar does not manage it; " +
		"delete or rename that Deployment, or choose another spec.deployment.name"
	f.bars = append(f.bars, withStatus(bar, 0, metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned, msg))
	f.deployments = append(f.deployments, foreign)
	// Already reported: no request, no second Warning.
	f.run(ctx, keyOf(bar))
}

// A rename is make before break: the sync that creates the Deployment
// under the new name keeps the old one, which serves until the new one is
// available, and says so.
func TestRenameKeepsOldDeploymentUntilNewIsAvailable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 1), 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(1, 1, "web"))
	old := ownedDeployment(bar)
	bar.Spec.Deployment.Name = "web-v2"
	bar.Generation++
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, old)

	f.kubeactions = append(f.kubeactions, createDeploymentAction(bar))
	f.actions = append(f.actions, applyStatusAction(bar, 0, metav1.ConditionFalse, barv1.ReasonRenaming,
		"renamed from Deployment web to web-v2: web keeps serving until web-v2 has 1 available replicas (it has 0)", fixedNow))
	f.events = []string{"Normal DeploymentCreated Created Deployment web-v2"}
	f.run(ctx, keyOf(bar))
}

// Once the new Deployment is available, the old one goes, by UID.
func TestRenameDeletesOldDeploymentOnceNewIsAvailable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	renaming := "renamed from Deployment web to web-v2: web keeps serving until web-v2 has 1 available replicas (it has 0)"
	bar := withStatus(newBar("test", "web", 1), 0, metav1.ConditionFalse, barv1.ReasonRenaming, renaming)
	old := ownedDeployment(bar)
	bar.Spec.Deployment.Name = "web-v2"
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, old, ownedDeployment(bar))

	f.kubeactions = append(f.kubeactions, deleteDeploymentAction(old))
	f.actions = append(f.actions, applyStatusAction(bar, 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable,
		readyMessage(1, 1, "web-v2"), fixedNow))
	f.events = []string{"Normal DeploymentDeleted Deleted Deployment web: the Bar now names Deployment web-v2, which is available"}
	f.run(ctx, keyOf(bar))
}

// A new Deployment that stops making progress keeps the old one serving,
// and is announced with a Warning, once.
func TestRenameStuckPastProgressDeadlineKeepsOldDeployment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	renaming := "renamed from Deployment web to web-v2: web keeps serving until web-v2 has 2 available replicas (it has 0)"
	bar := withStatus(newBar("test", "web", 2), 0, metav1.ConditionFalse, barv1.ReasonRenaming, renaming)
	old := ownedDeployment(bar)
	bar.Spec.Deployment.Name = "web-v2"
	stuck := ownedDeployment(bar)
	stuck.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 0, Conditions: []appsv1.DeploymentCondition{{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
		Message: `ReplicaSet "web-v2-5d4f" has timed out progressing.`}}}
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, old, stuck)

	msg := `Deployment web-v2 is not making progress: ReplicaSet "web-v2-5d4f" has timed out progressing.; ` +
		"Deployment web, from before the Bar was renamed, keeps serving until web-v2 is available"
	f.actions = append(f.actions, applyStatusAction(bar, 0, metav1.ConditionFalse, barv1.ReasonProgressDeadlineExceeded,
		msg, metav1.NewTime(fixedNow.Add(-time.Hour))))
	f.events = []string{"Warning ProgressDeadlineExceeded " + msg}
	f.run(ctx, keyOf(bar))
}

func TestStatusOnlyChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	waiting := "waiting for Deployment web to have 2 available replicas (it has 2 replicas: 2 up to date, 1 available)"
	bar := withStatus(newBar("test", "web", 2), 1, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable, waiting)
	d := ownedDeployment(bar) // both replicas are available now
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, d)

	f.actions = append(f.actions, applyStatusAction(bar, 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable,
		readyMessage(2, 2, "web"), fixedNow))
	f.run(ctx, keyOf(bar))
}

func TestStaleObservedGenerationIsWritten(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 1), 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(1, 1, "web"))
	bar.Generation++ // e.g. a label-only change would not do this; a spec edit that lands on the same Deployment does
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, ownedDeployment(bar))

	// The condition keeps its transition time: its status did not flip.
	f.actions = append(f.actions, applyStatusAction(bar, 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable,
		readyMessage(1, 1, "web"), metav1.NewTime(fixedNow.Add(-time.Hour))))
	f.run(ctx, keyOf(bar))
}

func TestDeletedBarMakesNoRequests(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.deployments = append(f.deployments, ownedDeployment(bar)) // left for the garbage collector
	f.run(ctx, keyOf(bar))
}

// TestSyncWaitsForCacheToSeeItsOwnWrites: right after a sync creates the
// Deployment, a second sync that still sees the old caches must neither
// apply again nor announce the creation again.
func TestSyncWaitsForCacheToSeeItsOwnWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	// The fake API server hands out no resourceVersions; stamp the answers
	// to the controller's writes as a real one would.
	f.kubeclient.PrependReactor("patch", "deployments", stampResourceVersion(f.kubeclient.Tracker(), "30"))
	f.client.PrependReactor("patch", "bars", stampResourceVersion(f.client.Tracker(), "31"))
	// The caches have read up to versions older than those writes.
	for _, indexer := range []cache.Indexer{f.kubeInformers.Apps().V1().Deployments().Informer().GetIndexer(), c.deploymentMetaIndexer} {
		if err := indexer.Replace(nil, "15"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.syncHandler(ctx, keyOf(bar)); err != nil {
		t.Fatal(err)
	}
	requests := len(f.kubeclient.Actions()) + len(f.client.Actions())

	err := c.syncHandler(ctx, keyOf(bar))
	var stale *staleCacheError
	if !errors.As(err, &stale) {
		t.Fatalf("second sync on caches that miss its own writes: got %v, want a staleCacheError", err)
	}
	if n := len(f.kubeclient.Actions()) + len(f.client.Actions()); n != requests {
		t.Errorf("the second sync made %d more requests", n-requests)
	}
	if n := len(f.recorder.Events); n != 1 {
		t.Errorf("%d events, want the single DeploymentCreated", n)
	}
}

// A rename to a name someone else's Deployment holds must not take the old
// Deployment down: the Bar keeps serving from it and reports the clash.
func TestRenameOntoForeignDeploymentKeepsOldOne(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := withStatus(newBar("test", "web", 1), 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(1, 1, "web"))
	old := ownedDeployment(bar)
	bar.Spec.Deployment.Name = "taken"
	bar.Generation++
	foreign := ownedDeployment(bar)
	foreign.OwnerReferences = nil
	f.bars = append(f.bars, bar)
	f.deployments = append(f.deployments, old, foreign)

	msg := "Deployment taken already exists with no controller, so this Bar does not manage it; " +
		"delete or rename that Deployment, or choose another spec.deployment.name"
	f.actions = append(f.actions, applyStatusAction(bar, 0, metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned, msg, fixedNow))
	f.events = []string{"Warning DeploymentNotOwned " + msg}
	f.run(ctx, keyOf(bar))
}

// A Bar in a namespace being deleted: the API server refuses to create the
// Deployment, and the controller does not retry (the Bar goes with the
// namespace) or write a status about it.
func TestTerminatingNamespaceIsNotRetried(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("test", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		err := apierrors.NewForbidden(appsv1.Resource("deployments"), "web",
			fmt.Errorf("unable to create new content in namespace default because it is being terminated"))
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Field: "default"}}
		return true, nil, err
	})
	if err := c.syncHandler(ctx, keyOf(bar)); err != nil {
		t.Fatalf("syncHandler: %v, want no error (no retry)", err)
	}
	checkActions(t, "kube", []core.Action{createDeploymentAction(bar)}, f.kubeclient.Actions())
	checkActions(t, "bar", nil, f.client.Actions())
	checkEvents(t, nil, f.recorder.Events)
}
