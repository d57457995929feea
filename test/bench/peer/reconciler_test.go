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
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// These tests run Reconcile on controller-runtime's fake client, which
// stands for the manager's cache and the API server at once, and check
// every write it makes: above all, none once a Bar is converged.

// env is a reconciler on controller-runtime's fake client, with the
// writes it makes and the Events it records.
type env struct {
	r      *BarReconciler
	c      client.Client
	events *events.FakeRecorder

	mu     sync.Mutex
	writes []string
}

func newEnv(t *testing.T, fail interceptor.Funcs, objs ...client.Object) *env {
	e := &env{events: events.NewFakeRecorder(100)}
	note := func(verb string, obj client.Object, sub string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.writes = append(e.writes, verb+" "+resourceOf(obj)+"/"+obj.GetName()+sub)
	}
	funcs := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			note("create", obj, "")
			if fail.Create != nil {
				return fail.Create(ctx, c, obj, opts...)
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			note("update", obj, "")
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			note("delete", obj, "")
			return c.Delete(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			note("patch", obj, "")
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			note("update", obj, "/"+sub)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			note("patch", obj, "/"+sub)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(objs...).
		WithStatusSubresource(&barv1.Bar{}, &appsv1.Deployment{}).
		WithIndex(&appsv1.Deployment{}, deploymentOwnerKey, indexDeploymentOwner).
		WithIndex(&barv1.Bar{}, barDeploymentNameKey, indexBarDeploymentName).
		WithInterceptorFuncs(funcs).
		Build()
	e.c = c
	e.r = &BarReconciler{Client: c, Scheme: c.Scheme(), Recorder: e.events}
	return e
}

func resourceOf(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "deployments"
	case *barv1.Bar:
		return "bars"
	}
	return "?"
}

// reconcile runs one Reconcile of ns/name and returns the writes and
// Events it made.
func (e *env) reconcile(t *testing.T, name string) (writes, recorded []string) {
	t.Helper()
	e.mu.Lock()
	e.writes = nil
	e.mu.Unlock()
	res, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res != (ctrl.Result{}) {
		t.Errorf("Reconcile returned %+v, want no requeue", res)
	}
	for len(e.events.Events) > 0 {
		recorded = append(recorded, <-e.events.Events)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writes, recorded
}

func (e *env) bar(t *testing.T, name string) *barv1.Bar {
	t.Helper()
	var bar barv1.Bar
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &bar); err != nil {
		t.Fatal(err)
	}
	return &bar
}

func (e *env) deployment(t *testing.T, name string) (*appsv1.Deployment, bool) {
	t.Helper()
	var d appsv1.Deployment
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &d)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return &d, true
}

// makeAvailable plays the Deployment controller: all replicas up.
func (e *env) makeAvailable(t *testing.T, name string) {
	t.Helper()
	d, _ := e.deployment(t, name)
	n := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, AvailableReplicas: n}
	if err := e.c.Status().Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func checkWrites(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("%s: writes %q, want %q", step, got, want)
	}
}

func checkReady(t *testing.T, bar *barv1.Bar, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady)
	if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != bar.Generation {
		t.Errorf("Ready condition %+v, want %s %s", c, status, reason)
	}
	if bar.Status.ObservedGeneration != bar.Generation {
		t.Errorf("observedGeneration %d, want %d", bar.Status.ObservedGeneration, bar.Generation)
	}
}

func TestReconcileCreatesThenWritesNothing(t *testing.T) {
	bar := newBar("web", "front")
	e := newEnv(t, interceptor.Funcs{}, bar)

	writes, recorded := e.reconcile(t, "web")
	checkWrites(t, "first", writes, "create deployments/front", "update bars/web/status")
	if strings.Join(recorded, "|") != "Normal DeploymentCreated Created Deployment front" {
		t.Errorf("Events %q", recorded)
	}
	d, ok := e.deployment(t, "front")
	if !ok {
		t.Fatal("no Deployment")
	}
	want := wantFor(bar, "nginx:1.29.0", 2, "web")
	if !equality.Semantic.DeepEqual(d.Labels, want.Labels) || !equality.Semantic.DeepEqual(d.OwnerReferences, want.OwnerReferences) ||
		!equality.Semantic.DeepEqual(d.Spec, want.Spec) {
		t.Errorf("Deployment %+v, want %+v", d, want)
	}
	checkReady(t, e.bar(t, "web"), metav1.ConditionFalse, barv1.ReasonReplicasUnavailable)

	writes, recorded = e.reconcile(t, "web")
	checkWrites(t, "converged", writes)
	if len(recorded) != 0 {
		t.Errorf("converged: Events %q", recorded)
	}

	e.makeAvailable(t, "front")
	writes, _ = e.reconcile(t, "web")
	checkWrites(t, "available", writes, "update bars/web/status")
	got := e.bar(t, "web")
	checkReady(t, got, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable)
	if got.Status.AvailableReplicas != 2 {
		t.Errorf("availableReplicas %d, want 2", got.Status.AvailableReplicas)
	}
	writes, recorded = e.reconcile(t, "web")
	checkWrites(t, "available, converged", writes)
	if len(recorded) != 0 {
		t.Errorf("available, converged: Events %q", recorded)
	}
}

func TestReconcileRepairsDrift(t *testing.T) {
	e := newEnv(t, interceptor.Funcs{}, newBar("web", "web"))
	e.reconcile(t, "web")
	d, _ := e.deployment(t, "web")
	d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0" // kubectl set image
	if err := e.c.Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	writes, recorded := e.reconcile(t, "web")
	checkWrites(t, "drift", writes, "update deployments/web")
	if strings.Join(recorded, "|") != "Normal DeploymentUpdated Updated Deployment web to match the Bar" {
		t.Errorf("Events %q", recorded)
	}
	if d, _ := e.deployment(t, "web"); d.Spec.Template.Spec.Containers[0].Image != "nginx:1.29.0" {
		t.Errorf("image %s", d.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestReconcileLeavesSomeoneElsesDeploymentAlone(t *testing.T) {
	theirs := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Labels: map[string]string{"app": "theirs"}}}
	e := newEnv(t, interceptor.Funcs{}, newBar("web", "web"), theirs)

	writes, recorded := e.reconcile(t, "web")
	checkWrites(t, "blocked", writes, "update bars/web/status")
	checkReady(t, e.bar(t, "web"), metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned)
	if len(recorded) != 1 || !strings.HasPrefix(recorded[0], "Warning DeploymentNotOwned Deployment web already exists with no controller") {
		t.Errorf("Events %q", recorded)
	}
	if d, _ := e.deployment(t, "web"); !equality.Semantic.DeepEqual(d.Labels, theirs.Labels) || len(d.OwnerReferences) != 0 {
		t.Errorf("their Deployment was changed: %+v", d)
	}
	writes, recorded = e.reconcile(t, "web")
	checkWrites(t, "still blocked", writes)
	if len(recorded) != 0 {
		t.Errorf("still blocked: Events %q (the Warning is announced once)", recorded)
	}

	// Their Deployment goes: the watch maps it to the Bar that names it.
	if reqs := e.r.barsNaming(context.Background(), theirs); len(reqs) != 1 || reqs[0].Name != "web" {
		t.Errorf("barsNaming = %v", reqs)
	}
	if err := e.c.Delete(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}
	writes, _ = e.reconcile(t, "web")
	checkWrites(t, "unblocked", writes, "create deployments/web", "update bars/web/status")
}

func TestReconcileRefusedDeployment(t *testing.T) {
	invalid := interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
		return apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web",
			field.ErrorList{field.Invalid(field.NewPath("spec"), "x", "no")})
	}}
	e := newEnv(t, invalid, newBar("web", "web"))
	writes, recorded := e.reconcile(t, "web")
	checkWrites(t, "refused", writes, "create deployments/web", "update bars/web/status")
	checkReady(t, e.bar(t, "web"), metav1.ConditionFalse, barv1.ReasonApplyFailed)
	if len(recorded) != 1 || !strings.HasPrefix(recorded[0], "Warning ApplyFailed the API server rejected Deployment web") {
		t.Errorf("Events %q", recorded)
	}
}

func TestReconcileRenameMakesBeforeBreak(t *testing.T) {
	e := newEnv(t, interceptor.Funcs{}, newBar("web", "v1"))
	e.reconcile(t, "web")
	e.makeAvailable(t, "v1")
	e.reconcile(t, "web")

	bar := e.bar(t, "web")
	bar.Spec.Deployment.Name = "v2"
	bar.Generation = 2
	if err := e.c.Update(context.Background(), bar); err != nil {
		t.Fatal(err)
	}
	writes, _ := e.reconcile(t, "web")
	checkWrites(t, "renamed", writes, "create deployments/v2", "update bars/web/status")
	checkReady(t, e.bar(t, "web"), metav1.ConditionFalse, barv1.ReasonRenaming)
	if _, ok := e.deployment(t, "v1"); !ok {
		t.Fatal("old Deployment deleted before the new one is available")
	}

	e.makeAvailable(t, "v2")
	writes, recorded := e.reconcile(t, "web")
	checkWrites(t, "new one available", writes, "delete deployments/v1", "update bars/web/status")
	if strings.Join(recorded, "|") != "Normal DeploymentDeleted Deleted Deployment v1: the Bar now names Deployment v2, which is available" {
		t.Errorf("Events %q", recorded)
	}
	if _, ok := e.deployment(t, "v1"); ok {
		t.Error("old Deployment kept")
	}
	checkReady(t, e.bar(t, "web"), metav1.ConditionTrue, barv1.ReasonDeploymentAvailable)
	writes, _ = e.reconcile(t, "web")
	checkWrites(t, "converged", writes)
}

func TestReconcileGoneOrDeletedBar(t *testing.T) {
	deleting := newBar("old", "old")
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = []string{"example.com/hold"} // the fake client refuses a deleting object without one
	e := newEnv(t, interceptor.Funcs{}, deleting)
	for _, name := range []string{"gone", "old"} {
		writes, _ := e.reconcile(t, name)
		checkWrites(t, name, writes)
	}
}
