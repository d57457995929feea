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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// This file holds the sync step: syncHandler reads one Bar and its
// Deployments from the caches, writes only what differs, and reports in
// the Bar's status (updateStatus). controller.go hands it the keys.

// syncHandler is the sync step. It reads the Bar and its Deployments from
// the caches, writes only what differs, and reports in the Bar's status.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "bar", key)
	ctx = klog.NewContext(ctx, logger)

	bar, err := c.barsLister.Bars(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		// The garbage collector deletes the Deployment through its
		// ownerReference; nothing is left for us to do.
		logger.V(4).Info("Bar no longer exists")
		c.trace.decision(key, "Bar is gone: nothing to do, the garbage collector removes its Deployment", "")
		c.writes.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if bar.DeletionTimestamp != nil {
		// Being deleted: do not recreate what the garbage collector removes.
		// Nothing more is written for it, so nothing to wait for either.
		c.trace.decision(key, "Bar is being deleted: nothing to do", "")
		c.writes.forget(key)
		return nil
	}
	if err := c.writes.caughtUp(key); err != nil {
		c.trace.decision(key, "cache older than our last write: wait and retry", err.Error())
		return err
	}

	holder, deployment, err := c.deploymentFor(bar)
	var stale *staleCacheError
	if errors.As(err, &stale) {
		c.trace.read(key, bar, nil)
		c.trace.decision(key, "the Deployment caches disagree: wait for them to agree", err.Error())
		return err
	}
	if err != nil {
		return err
	}
	c.trace.read(key, bar, deployment)
	if holder != nil && !metav1.IsControlledBy(holder, bar) {
		// Someone else's Deployment: never touch it. No error either, so no
		// retry loop: the Deployment handler enqueues this Bar again when
		// that Deployment changes or goes away.
		c.trace.decision(key, "Deployment is not controlled by this Bar: leave it alone", "")
		return c.updateStatus(ctx, bar, 0, notOwnedReadiness(holder))
	}

	deployment, err = c.applyDeployment(ctx, bar, holder, deployment)
	if apierrors.IsAlreadyExists(err) && c.shard != nil {
		// Sharded, a Deployment can exist where neither cache sees it:
		// one whose bucket label names another shard (an edit, or
		// another shard's Bar asking for the same name). Nothing will
		// show it, so read it once, and judge it as the caches would.
		c.trace.decision(key, "Deployment exists outside this shard's caches: read it", "")
		live, getErr := c.kubeclientset.AppsV1().Deployments(bar.Namespace).Get(ctx, bar.Spec.Deployment.Name, metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		if !metav1.IsControlledBy(live, bar) {
			// Another shard's Bar's: no cache of this shard will say when
			// it goes, so look again after a while (the create that finds
			// it, then this read: two requests a minute for such a Bar).
			c.queue.AddAfter(key, outsideCachesRecheck)
			return c.updateStatus(ctx, bar, 0, notOwnedReadiness(live))
		}
		deployment, err = c.applyDeployment(ctx, bar, live, nil)
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// The namespace is going, and the Bar with it: retrying would only
		// repeat a create the API server refuses until the Bar is gone.
		c.trace.decision(key, "namespace is being deleted: nothing to do", "")
		logger.V(2).Info("Not creating the Deployment: the namespace is being deleted")
		return nil
	}
	if apierrors.IsInvalid(err) {
		// Retrying the same request gets the same answer; a change to the
		// Bar enqueues it again.
		return c.updateStatus(ctx, bar, 0, readiness{metav1.ConditionFalse, barv1.ReasonApplyFailed,
			fmt.Sprintf("the API server rejected Deployment %s: %v", bar.Spec.Deployment.Name, err)})
	}
	if err != nil {
		return err
	}
	// Make before break: Deployments under an old name (the Bar was
	// renamed) go only once the wanted one is available, so a rename never
	// leaves the Bar with nothing serving, even when the new Deployment
	// cannot become available (a bad image, a quota).
	r := deploymentReadiness(bar, deployment)
	old, err := c.oldDeployments(bar)
	if err != nil {
		return err
	}
	if len(old) > 0 {
		if r.status != metav1.ConditionTrue {
			c.trace.decision(key, "renamed: keep the old Deployment until the new one is available", oldNames(old))
			return c.updateStatus(ctx, bar, deployment.Status.AvailableReplicas, renamingReadiness(bar, r, deployment, old))
		}
		if err := c.deleteOldDeployments(ctx, bar, old); err != nil {
			return err
		}
	}
	return c.updateStatus(ctx, bar, deployment.Status.AvailableReplicas, deploymentReadiness(bar, deployment))
}

// deploymentFor reads the Deployment the Bar asks for from the caches:
// holder is whatever holds that name (nil if nothing does), and have the
// whole Deployment if it is one this controller manages (nil otherwise).
// The full cache holds the Deployments with the controller's managed-by
// label, the metadata cache every other, so a Deployment of ours whose
// label someone removed has a holder and no have.
func (c *Controller) deploymentFor(bar *barv1.Bar) (holder metav1.Object, have *appsv1.Deployment, err error) {
	have, err = c.deploymentsLister.Deployments(bar.Namespace).Get(bar.Spec.Deployment.Name)
	if apierrors.IsNotFound(err) {
		have = nil
	} else if err != nil {
		return nil, nil, err
	}
	obj, exists, err := c.deploymentMetaIndexer.GetByKey(bar.Namespace + "/" + bar.Spec.Deployment.Name)
	if err != nil {
		return nil, nil, err
	}
	var meta metav1.Object
	if exists {
		meta = obj.(metav1.Object)
	}
	// While its label changes, both caches may hold a copy of it:
	// believe the newer, or wait (freshness.go).
	return newestDeployment(bar, have, meta)
}

// applyDeployment makes the Deployment match the Bar, writing only if the
// cached one (have) differs, and returns the result. holder is the
// Deployment the caches show under the name (then it is this Bar's), nil
// if there is none; have is nil when there is none, or when it lost the
// label that puts it in the full cache.
func (c *Controller) applyDeployment(ctx context.Context, bar *barv1.Bar, holder metav1.Object, have *appsv1.Deployment) (*appsv1.Deployment, error) {
	key := cache.MetaObjectToName(bar)
	want := c.wantDeployment(bar) // hashed only if written (withDesiredHash)
	var diff []string
	switch {
	case have != nil:
		if diff = deploymentDrift(want, have); len(diff) == 0 {
			c.trace.decision(key, "Deployment up to date: no write", "")
			return have, nil
		}
		c.trace.decision(key, "Deployment differs: apply with force", strings.Join(diff, ", "))
	case holder != nil:
		diff = []string{"metadata.labels"}
		c.trace.decision(key, "Deployment lost its managed-by label: apply with force", "")
	default:
		c.trace.decision(key, "no Deployment in the cache: create it", "")
		return c.createDeployment(ctx, bar, withDesiredHash(want))
	}
	want = withDesiredHash(want) // before the preconditions: no part of the hash
	// Force takes fields back from whoever changed them; it is used only on a
	// Deployment the cache shows this Bar controls. The cache may be behind
	// the API server: someone may have taken the Deployment away (removed its
	// ownerReference) a moment ago, and a forced apply would put the reference
	// back. So the apply carries the resourceVersion it was judged on, a
	// precondition: if the Deployment changed since, the API server answers
	// Conflict, and the retry judges the newer version. The UID does the same
	// for a Deployment deleted since: without it, the apply would create one.
	if rv := holder.GetResourceVersion(); rv != "" {
		want.WithResourceVersion(rv).WithUID(holder.GetUID())
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	start := time.Now()
	d, err := c.kubeclientset.AppsV1().Deployments(bar.Namespace).Apply(ctx, want, opts)
	c.trace.apiCall(key, "apply deployments/"+bar.Spec.Deployment.Name, start, d, err)
	if err != nil {
		return nil, fmt.Errorf("applying Deployment %s: %w", bar.Spec.Deployment.Name, err)
	}
	if have != nil && d.ResourceVersion == have.ResourceVersion {
		// The API server already held all of it (another writer put the
		// same values back first, say): nothing changed, nothing to announce.
		c.trace.decision(key, "apply changed nothing", "")
		return d, nil
	}
	c.writes.wrote(key, bar.UID, "deployments", d.ResourceVersion)
	c.recorder.Eventf(bar, nil, corev1.EventTypeNormal, EventDeploymentUpdated, actionUpdate, "Updated Deployment %s to match the Bar: %s",
		d.Name, strings.Join(diff, ", "))
	klog.FromContext(ctx).V(2).Info("Applied Deployment", "deployment", klog.KObj(d))
	return d, nil
}

// createDeployment creates the Deployment the caches show nobody holds.
// A plain create, not an apply: it costs the API server about half as
// much (make bench --breakdown), and what it records in managedFields
// serves drift detection as an apply's would (isOurWrite). And it cannot
// take anything over: a Deployment someone created a moment ago, not yet
// in the caches, makes it fail with AlreadyExists, and the retry finds
// that Deployment in the caches and leaves it alone if it is not ours.
// Repairs stay applies, which take back exactly the fields the
// controller sets.
func (c *Controller) createDeployment(ctx context.Context, bar *barv1.Bar, want *appsv1ac.DeploymentApplyConfiguration) (*appsv1.Deployment, error) {
	key := cache.MetaObjectToName(bar)
	obj, err := deploymentObject(want)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	d, err := c.postDeployment(ctx, obj)
	c.trace.apiCall(key, "create deployments/"+bar.Spec.Deployment.Name, start, d, err)
	if err != nil {
		return nil, fmt.Errorf("creating Deployment %s: %w", bar.Spec.Deployment.Name, err)
	}
	c.writes.wrote(key, bar.UID, "deployments", d.ResourceVersion)
	c.recorder.Eventf(bar, nil, corev1.EventTypeNormal, EventDeploymentCreated, actionCreate, "Created Deployment %s", d.Name)
	klog.FromContext(ctx).V(2).Info("Created Deployment", "deployment", klog.KObj(d))
	return d, nil
}

// oldDeployments returns the Deployments the Bar controls under a name it
// no longer asks for (spec.deployment.name changed), but not those already
// being deleted.
//
// They are in either cache, in both while a label changes (the newer copy
// counts; one taken away meanwhile fails the delete's preconditions).
func (c *Controller) oldDeployments(bar *barv1.Bar) ([]metav1.Object, error) {
	newest := map[types.UID]metav1.Object{}
	var order []types.UID
	for _, indexer := range []cache.Indexer{c.deploymentsIndexer, c.deploymentMetaIndexer} {
		owned, err := indexer.ByIndex(deploymentsByBarUID, string(bar.UID))
		if err != nil {
			return nil, err
		}
		for _, obj := range owned {
			d := obj.(metav1.Object)
			seen, ok := newest[d.GetUID()]
			if !ok {
				order = append(order, d.GetUID())
				newest[d.GetUID()] = d
				continue
			}
			if cmp, comparable := compareRVs(d.GetResourceVersion(), seen.GetResourceVersion()); comparable && cmp > 0 {
				newest[d.GetUID()] = d
			}
		}
	}
	var old []metav1.Object
	for _, uid := range order {
		d := newest[uid]
		if d.GetName() != bar.Spec.Deployment.Name && d.GetNamespace() == bar.Namespace && d.GetDeletionTimestamp() == nil &&
			metav1.IsControlledBy(d, bar) {
			old = append(old, d)
		}
	}
	return old, nil
}

// deleteOldDeployments removes the Deployments a rename left behind.
func (c *Controller) deleteOldDeployments(ctx context.Context, bar *barv1.Bar, old []metav1.Object) error {
	key := cache.MetaObjectToName(bar)
	for _, d := range old {
		c.trace.decision(key, "renamed, and the new Deployment is available: delete the old one", d.GetName())
		// The preconditions make sure we delete the object we looked at,
		// not a namesake created since (the UID), and as we looked at it
		// (the resourceVersion): a Deployment someone took away from the
		// Bar since the cache read it is no longer ours to delete.
		pre := metav1.Preconditions{UID: ptr.To(d.GetUID())}
		if rv := d.GetResourceVersion(); rv != "" {
			pre.ResourceVersion = &rv
		}
		start := time.Now()
		err := c.kubeclientset.AppsV1().Deployments(d.GetNamespace()).Delete(ctx, d.GetName(),
			metav1.DeleteOptions{Preconditions: &pre})
		c.trace.apiCall(key, "delete deployments/"+d.GetName(), start, nil, err)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deleting old Deployment %s: %w", d.GetName(), err)
		}
		c.recorder.Eventf(bar, nil, corev1.EventTypeNormal, EventDeploymentDeleted, actionDelete,
			"Deleted Deployment %s: the Bar now names Deployment %s, which is available", d.GetName(), bar.Spec.Deployment.Name)
		klog.FromContext(ctx).V(2).Info("Deleted old Deployment", "deployment", klog.KObj(d))
	}
	return nil
}

func oldNames(old []metav1.Object) string {
	names := make([]string, len(old))
	for i, d := range old {
		names[i] = d.GetName()
	}
	return strings.Join(names, ", ")
}

// updateStatus is the status step: write the Bar's status through the status
// subresource if, and only if, it would change.
func (c *Controller) updateStatus(ctx context.Context, bar *barv1.Bar, available int32, r readiness) error {
	key := cache.MetaObjectToName(bar)
	want := newStatus(bar, available, r, c.now())
	if !statusChanged(&bar.Status, &want) {
		c.trace.decision(key, "status unchanged: no write", r.reason)
		return nil
	}
	c.trace.decision(key, "status changed: write it", r.reason)
	start := time.Now()
	updated, err := c.applyStatus(ctx, bar, statusApplyConfiguration(bar, &want))
	c.trace.apiCall(key, "apply bars/"+bar.Name+"/status", start, updated, err)
	if err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	c.writes.wrote(key, bar.UID, "bars", updated.ResourceVersion)

	// Problems are announced once, when the Bar enters them.
	if old := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady); r.status == metav1.ConditionFalse &&
		warningReasons[r.reason] && (old == nil || old.Reason != r.reason) {
		c.recorder.Eventf(bar, nil, corev1.EventTypeWarning, r.reason, actionSync, "%s", r.message)
	}
	return nil
}
