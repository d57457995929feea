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
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// Event reasons and actions. They are the ones bar-controller records, so
// that whoever reads a Bar's Events (and the bench, which counts them)
// sees the same thing from either controller.
const (
	eventDeploymentCreated = "DeploymentCreated"
	eventDeploymentUpdated = "DeploymentUpdated"
	eventDeploymentDeleted = "DeploymentDeleted"

	actionCreate = "Create"
	actionUpdate = "Update"
	actionDelete = "Delete"
	actionSync   = "Sync"
)

// Cache field indexes, as the kubebuilder book's CronJob tutorial sets
// them up: the cache answers both questions without listing a namespace.
const (
	// deploymentOwnerKey indexes Deployments by the name of the Bar that
	// controls them: a Bar finds the Deployments it left behind under a
	// name it no longer asks for.
	deploymentOwnerKey = ".metadata.controller"
	// barDeploymentNameKey indexes Bars by spec.deployment.name: a
	// Deployment that is not a Bar's finds the Bars it stands in the way of.
	barDeploymentNameKey = ".spec.deployment.name"
)

// BarReconciler makes each Bar's Deployment match the Bar and reports
// how it is doing in the Bar's status.
type BarReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=barcontroller.dev,resources=bars,verbs=get;list;watch
// +kubebuilder:rbac:groups=barcontroller.dev,resources=bars/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile reads the Bar and its Deployment from the manager's cache,
// writes the Deployment only if it differs (CreateOrUpdate), and writes
// the status only if it changed: a Bar that is as it should be costs no
// API call, which is what keeps a resync of every Bar free.
func (r *BarReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bar barv1.Bar
	if err := r.Get(ctx, req.NamespacedName, &bar); err != nil {
		// Deleted: the garbage collector removes its Deployments through
		// their owner references.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !bar.DeletionTimestamp.IsZero() {
		// Do not recreate what the garbage collector is removing.
		return ctrl.Result{}, nil
	}

	dep := deploymentFor(&bar)
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, dep, func() error {
		// A Deployment under the wanted name that this Bar does not
		// control (someone else's, or an orphan) is never adopted or
		// changed. ResourceVersion is set when it came from the cache,
		// empty when CreateOrUpdate is about to create it.
		if dep.ResourceVersion != "" && !metav1.IsControlledBy(dep, &bar) {
			return &notOwnedError{r: notOwnedReadiness(dep)}
		}
		return mutateDeployment(&bar, dep, r.Scheme)
	})
	var notOwned *notOwnedError
	switch {
	case errors.As(err, &notOwned):
		// No error, so no retry loop: the Deployment watch enqueues the
		// Bar again when that Deployment changes or goes away.
		return ctrl.Result{}, r.updateStatus(ctx, &bar, 0, notOwned.r)
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// The namespace, and the Bar with it, is going: retrying would
		// repeat a create the API server refuses until then.
		return ctrl.Result{}, nil
	case apierrors.IsInvalid(err):
		// The same request would get the same answer; a change to the Bar
		// enqueues it again.
		return ctrl.Result{}, r.updateStatus(ctx, &bar, 0, readiness{metav1.ConditionFalse, barv1.ReasonApplyFailed,
			fmt.Sprintf("the API server rejected Deployment %s: %v", dep.Name, err)})
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("creating or updating Deployment %s: %w", dep.Name, err)
	}
	switch op {
	case controllerutil.OperationResultCreated:
		r.Recorder.Eventf(&bar, nil, corev1.EventTypeNormal, eventDeploymentCreated, actionCreate, "Created Deployment %s", dep.Name)
	case controllerutil.OperationResultUpdated:
		r.Recorder.Eventf(&bar, nil, corev1.EventTypeNormal, eventDeploymentUpdated, actionUpdate, "Updated Deployment %s to match the Bar", dep.Name)
	}

	// A renamed Bar (spec.deployment.name changed) keeps its old
	// Deployment serving until the new one is available: make before
	// break, so a rename never leaves it with nothing running.
	ready := deploymentReadiness(&bar, dep)
	old, err := r.oldDeployments(ctx, &bar)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(old) > 0 {
		if ready.status != metav1.ConditionTrue {
			return ctrl.Result{}, r.updateStatus(ctx, &bar, dep.Status.AvailableReplicas, renamingReadiness(&bar, ready, dep, old))
		}
		for i := range old {
			if err := r.deleteOld(ctx, &bar, &old[i]); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return ctrl.Result{}, r.updateStatus(ctx, &bar, dep.Status.AvailableReplicas, ready)
}

// notOwnedError stops CreateOrUpdate before it writes anything to a
// Deployment the Bar does not control.
type notOwnedError struct{ r readiness }

func (e *notOwnedError) Error() string { return e.r.message }

// oldDeployments are the Deployments the Bar controls under another name
// than the one it asks for now, not already being deleted.
func (r *BarReconciler) oldDeployments(ctx context.Context, bar *barv1.Bar) ([]appsv1.Deployment, error) {
	var owned appsv1.DeploymentList
	if err := r.List(ctx, &owned, client.InNamespace(bar.Namespace), client.MatchingFields{deploymentOwnerKey: bar.Name}); err != nil {
		return nil, fmt.Errorf("listing the Bar's Deployments: %w", err)
	}
	var old []appsv1.Deployment
	for _, d := range owned.Items {
		// The index is by name; the UID check leaves out what a deleted
		// Bar of the same name left for the garbage collector.
		if d.Name != bar.Spec.Deployment.Name && d.DeletionTimestamp.IsZero() && metav1.IsControlledBy(&d, bar) {
			old = append(old, d)
		}
	}
	return old, nil
}

// deleteOld deletes a Deployment a rename left behind. The UID
// precondition makes sure it is the one looked at, not a namesake created
// since.
func (r *BarReconciler) deleteOld(ctx context.Context, bar *barv1.Bar, d *appsv1.Deployment) error {
	if err := r.Delete(ctx, d, client.Preconditions{UID: &d.UID}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deleting old Deployment %s: %w", d.Name, err)
	}
	r.Recorder.Eventf(bar, nil, corev1.EventTypeNormal, eventDeploymentDeleted, actionDelete,
		"Deleted Deployment %s: the Bar now names Deployment %s, which is available", d.Name, bar.Spec.Deployment.Name)
	return nil
}

// updateStatus writes the Bar's status through the status subresource if
// it changed. Comparing first matters: every reconcile of a converged Bar
// (its own status write comes back as an event, every resync replays
// every Bar) would otherwise write the same status again.
func (r *BarReconciler) updateStatus(ctx context.Context, bar *barv1.Bar, available int32, ready readiness) error {
	status := bar.Status.DeepCopy()
	status.ObservedGeneration = bar.Generation
	status.AvailableReplicas = available
	// SetStatusCondition keeps the old LastTransitionTime unless the
	// condition's status flips, so an unchanged condition compares equal.
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               barv1.ConditionReady,
		Status:             ready.status,
		Reason:             ready.reason,
		Message:            ready.message,
		ObservedGeneration: bar.Generation,
		LastTransitionTime: metav1.Now(),
	})
	if equality.Semantic.DeepEqual(&bar.Status, status) {
		return nil
	}
	before := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady)
	enteredProblem := ready.status == metav1.ConditionFalse && warningReasons[ready.reason] &&
		(before == nil || before.Reason != ready.reason)

	bar.Status = *status
	// Update, not Patch: the resourceVersion read from the cache makes a
	// write based on a stale Bar fail with a Conflict, and the requeue
	// judges the Bar again as the cache shows it next.
	if err := r.Status().Update(ctx, bar); err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	// Problems a person must act on are announced once, when the Bar
	// enters them, not at every reconcile while it stays there.
	if enteredProblem {
		r.Recorder.Eventf(bar, nil, corev1.EventTypeWarning, ready.reason, actionSync, "%s", ready.message)
	}
	return nil
}

// SetupWithManager registers the field indexes and the controller: Bars,
// the Deployments they own, and Deployments that stand in a Bar's way.
func (r *BarReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, workers int) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &appsv1.Deployment{}, deploymentOwnerKey, indexDeploymentOwner); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &barv1.Bar{}, barDeploymentNameKey, indexBarDeploymentName); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&barv1.Bar{}).
		Owns(&appsv1.Deployment{}).
		// Owns sees only Deployments a Bar controls. A Bar blocked by
		// someone else's Deployment of the name it wants must hear when
		// that one goes away (or is renamed), to create its own then, not
		// at the next resync.
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.barsNaming)).
		// "bars" names the work queue in the workqueue_* metrics.
		Named("bars").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// barsNaming maps a Deployment to the Bars whose spec.deployment.name is
// its name.
func (r *BarReconciler) barsNaming(ctx context.Context, obj client.Object) []reconcile.Request {
	var bars barv1.BarList
	if err := r.List(ctx, &bars, client.InNamespace(obj.GetNamespace()), client.MatchingFields{barDeploymentNameKey: obj.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "Listing the Bars that name a Deployment", "deployment", client.ObjectKeyFromObject(obj))
		return nil
	}
	reqs := make([]reconcile.Request, len(bars.Items))
	for i, b := range bars.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}}
	}
	return reqs
}

func indexDeploymentOwner(obj client.Object) []string {
	ref := metav1.GetControllerOf(obj)
	// The group, not the whole apiVersion: a reference written with
	// another version of the Bar API names the same Bar.
	if ref == nil || ref.Kind != "Bar" || !strings.HasPrefix(ref.APIVersion, barv1.SchemeGroupVersion.Group+"/") {
		return nil
	}
	return []string{ref.Name}
}

func indexBarDeploymentName(obj client.Object) []string {
	bar, ok := obj.(*barv1.Bar)
	if !ok || bar.Spec.Deployment.Name == "" {
		return nil
	}
	return []string{bar.Spec.Deployment.Name}
}
