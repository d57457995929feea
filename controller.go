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
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/metrics"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	barscheme "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/scheme"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions/barcontroller/v1alpha1"
	listers "github.com/barcontroller/bar-controller/pkg/generated/listers/barcontroller/v1alpha1"
)

const (
	controllerAgentName = "bar-controller"
	// fieldManager names the controller in every object's managedFields;
	// server-side apply uses it to know which fields are ours.
	fieldManager = "bar-controller"
	// syncTimeout bounds one sync. Syncs do not inherit cancellation from
	// Run's context, so that a shutdown lets in-flight syncs finish instead
	// of cutting their API calls in half; this bounds how long that takes.
	syncTimeout = 30 * time.Second
)

// Event reasons. Events are written only when something changes.
const (
	EventDeploymentCreated  = "DeploymentCreated"
	EventDeploymentUpdated  = "DeploymentUpdated"
	EventDeploymentDeleted  = "DeploymentDeleted"
	EventDeploymentNotOwned = barv1alpha1.ReasonDeploymentNotOwned
	EventApplyFailed        = barv1alpha1.ReasonApplyFailed
)

// The event recorder encodes the objects it reports on with client-go's
// scheme, which must therefore know Bars. Once, before any goroutine reads it.
func init() {
	utilruntime.Must(barscheme.AddToScheme(scheme.Scheme))
}

// Controller reconciles Bars into Deployments. An event travels through it
// in named steps: an informer handler (handlers.go) enqueues a Bar key;
// processNextWorkItem dequeues it; syncHandler computes and applies the
// Deployment; updateStatus reports the outcome on the Bar.
type Controller struct {
	kubeclientset kubernetes.Interface
	barclientset  clientset.Interface

	deploymentsLister  appslisters.DeploymentLister
	deploymentsIndexer cache.Indexer
	deploymentsSynced  cache.InformerSynced
	barsLister         listers.BarLister
	barsIndexer        cache.Indexer
	barsSynced         cache.InformerSynced

	// queue holds the keys of Bars to sync. It never holds the same key
	// twice, never gives one key to two workers at once, and backs off
	// keys whose syncs keep failing.
	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// writes keeps a sync from acting on a cache older than its own writes.
	writes *writeTracker
	// trace logs every step for the Bars --trace names; nil traces nothing.
	trace *tracer

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	logger      klog.Logger
	now         func() metav1.Time
}

// NewController wires the handlers and indexes into the informers. Call it
// before the informers start.
func NewController(
	ctx context.Context,
	kubeclientset kubernetes.Interface,
	barclientset clientset.Interface,
	deploymentInformer appsinformers.DeploymentInformer,
	barInformer informers.BarInformer) (*Controller, error) {
	logger := klog.FromContext(ctx)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(0)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclientset.CoreV1().Events("")})

	c := &Controller{
		kubeclientset:      kubeclientset,
		barclientset:       barclientset,
		deploymentsLister:  deploymentInformer.Lister(),
		deploymentsIndexer: deploymentInformer.Informer().GetIndexer(),
		deploymentsSynced:  deploymentInformer.Informer().HasSynced,
		barsLister:         barInformer.Lister(),
		barsIndexer:        barInformer.Informer().GetIndexer(),
		barsSynced:         barInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "bars"}),
		broadcaster: broadcaster,
		recorder:    broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: controllerAgentName}),
		logger:      logger,
		now:         metav1.Now,
	}
	c.writes = newWriteTracker(map[string]rvStore{
		"deployments": c.deploymentsIndexer,
		"bars":        c.barsIndexer,
	})

	if err := barInformer.Informer().AddIndexers(cache.Indexers{barsByDeploymentName: indexBarByDeploymentName}); err != nil {
		return nil, fmt.Errorf("adding Bar index: %w", err)
	}
	if err := deploymentInformer.Informer().AddIndexers(cache.Indexers{deploymentsByBarUID: indexDeploymentByBarUID}); err != nil {
		return nil, fmt.Errorf("adding Deployment index: %w", err)
	}
	if _, err := barInformer.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    c.addBar,
		UpdateFunc: c.updateBar,
	}); err != nil {
		return nil, fmt.Errorf("adding Bar event handler: %w", err)
	}
	if _, err := deploymentInformer.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    c.addDeployment,
		UpdateFunc: c.updateDeployment,
		DeleteFunc: c.deleteDeployment,
	}); err != nil {
		return nil, fmt.Errorf("adding Deployment event handler: %w", err)
	}
	return c, nil
}

// Trace makes the controller log every step it takes for the Bars whose
// "namespace/name" matches pattern (path.Match syntax; see trace.go). Call
// it before the informers start.
func (c *Controller) Trace(pattern string) error {
	t, err := newTracer(pattern, c.logger, c.queue.Len)
	if err != nil {
		return err
	}
	c.trace = t
	return nil
}

// HasSynced reports whether the informer caches have been filled; until
// then the controller would mistake "not cached yet" for "does not exist".
func (c *Controller) HasSynced() bool {
	return c.barsSynced() && c.deploymentsSynced()
}

// Run waits for the caches, then syncs Bars with the given number of workers
// until ctx is cancelled. It then stops handing out work, lets the syncs in
// progress finish, and returns.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.broadcaster.Shutdown()
	logger := klog.FromContext(ctx)

	logger.Info("Starting Bar controller", "workers", workers)
	logger.Info("Waiting for informer caches to sync")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.barsSynced, c.deploymentsSynced) {
		// Only a cancelled ctx ends the wait: a shutdown, not a failure.
		c.queue.ShutDown()
		logger.Info("Shut down before the caches synced")
		return nil
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.runWorker(ctx) })
	}
	logger.Info("Started workers")
	<-ctx.Done()
	logger.Info("Shutting down: finishing syncs in progress")
	c.queue.ShutDown() // wakes idle workers
	wg.Wait()
	logger.Info("Shut down workers")
	return nil
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

// processNextWorkItem is the dequeue step: take one key, sync it, and tell
// the queue how it went. It returns false when the worker should stop.
func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	c.trace.dequeued(key, c.queue.NumRequeues(key))
	if ctx.Err() != nil {
		// Shutting down: a queued key is not "in progress". It will be
		// synced again from the caches after the next start.
		return false
	}

	syncCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), syncTimeout)
	defer cancel()
	start := time.Now()
	err := c.syncHandler(syncCtx, key)
	var stale *staleCacheError
	switch {
	case err == nil:
		metrics.RecordSync(metrics.SyncSuccess, time.Since(start))
		c.trace.synced(key, start, metrics.SyncSuccess, nil)
		c.queue.Forget(key)
	case errors.As(err, &stale):
		// Not a failure: the informer is a few milliseconds behind.
		metrics.RecordSync(metrics.SyncStale, time.Since(start))
		c.trace.synced(key, start, metrics.SyncStale, err)
		klog.FromContext(ctx).V(4).Info("Waiting for the cache to catch up", "bar", key, "reason", err)
		c.queue.AddRateLimited(key)
	default:
		metrics.RecordSync(metrics.SyncError, time.Since(start))
		c.trace.synced(key, start, metrics.SyncError, err)
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing Bar; will retry", "bar", key)
		c.queue.AddRateLimited(key)
	}
	return true
}

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
		c.trace.decision(key, "Bar is being deleted: nothing to do", "")
		return nil
	}
	if err := c.writes.caughtUp(key); err != nil {
		c.trace.decision(key, "cache older than our last write: wait and retry", err.Error())
		return err
	}

	deployment, err := c.deploymentsLister.Deployments(bar.Namespace).Get(bar.Spec.DeploymentName)
	if apierrors.IsNotFound(err) {
		deployment = nil
	} else if err != nil {
		return err
	}
	c.trace.read(key, bar, deployment)
	if deployment != nil && !metav1.IsControlledBy(deployment, bar) {
		// Someone else's Deployment: never touch it. No error either, so no
		// retry loop: the Deployment handler enqueues this Bar again when
		// that Deployment changes or goes away.
		c.trace.decision(key, "Deployment is not controlled by this Bar: leave it alone", "")
		return c.updateStatus(ctx, bar, 0, notOwnedReadiness(deployment))
	}

	deployment, err = c.applyDeployment(ctx, bar, deployment)
	if apierrors.IsInvalid(err) {
		// Retrying the same request gets the same answer; a change to the
		// Bar enqueues it again.
		return c.updateStatus(ctx, bar, 0, readiness{metav1.ConditionFalse, barv1alpha1.ReasonApplyFailed,
			fmt.Sprintf("the API server rejected Deployment %s: %v", bar.Spec.DeploymentName, err)})
	}
	if err != nil {
		return err
	}
	// Only now that the wanted Deployment exists do the ones under an old
	// name go: a rename never leaves the Bar with nothing running, and a
	// rename to a name that is taken keeps the old Deployment serving.
	if err := c.deleteStaleDeployments(ctx, bar); err != nil {
		return err
	}
	return c.updateStatus(ctx, bar, deployment.Status.AvailableReplicas, deploymentReadiness(bar, deployment))
}

// applyDeployment makes the Deployment match the Bar, writing only if the
// cached one (have, nil if none) differs, and returns the result.
func (c *Controller) applyDeployment(ctx context.Context, bar *barv1alpha1.Bar, have *appsv1.Deployment) (*appsv1.Deployment, error) {
	key := cache.MetaObjectToName(bar)
	want := newDeployment(bar)
	var diff []string
	if have != nil {
		if diff = deploymentDiff(want, have); len(diff) == 0 {
			c.trace.decision(key, "Deployment up to date: no write", "")
			return have, nil
		}
		c.trace.decision(key, "Deployment differs: apply with force", strings.Join(diff, ", "))
	} else {
		c.trace.decision(key, "no Deployment in the cache: create it", "")
	}
	// Force takes fields back from whoever changed them, so it is used only
	// on a Deployment the cache shows this Bar controls. When the cache
	// shows none, an unforced apply turns a Deployment that someone created
	// a moment ago into a conflict error instead of taking it over.
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: have != nil}
	start := time.Now()
	d, err := c.kubeclientset.AppsV1().Deployments(bar.Namespace).Apply(ctx, want, opts)
	c.trace.apiCall(key, "apply deployments/"+bar.Spec.DeploymentName, start, d, err)
	if err != nil {
		return nil, fmt.Errorf("applying Deployment %s: %w", bar.Spec.DeploymentName, err)
	}
	c.writes.wrote(key, bar.UID, "deployments", d.ResourceVersion)
	if have == nil {
		c.recorder.Eventf(bar, corev1.EventTypeNormal, EventDeploymentCreated, "Created Deployment %s", d.Name)
	} else {
		c.recorder.Eventf(bar, corev1.EventTypeNormal, EventDeploymentUpdated, "Updated Deployment %s to match the Bar: %s",
			d.Name, strings.Join(diff, ", "))
	}
	klog.FromContext(ctx).V(2).Info("Applied Deployment", "deployment", klog.KObj(d), "created", have == nil)
	return d, nil
}

// deleteStaleDeployments removes Deployments the Bar controls under a name
// it no longer asks for (spec.deploymentName changed).
func (c *Controller) deleteStaleDeployments(ctx context.Context, bar *barv1alpha1.Bar) error {
	owned, err := c.deploymentsIndexer.ByIndex(deploymentsByBarUID, string(bar.UID))
	if err != nil {
		return err
	}
	for _, obj := range owned {
		d := obj.(*appsv1.Deployment)
		if d.Name == bar.Spec.DeploymentName || d.Namespace != bar.Namespace || d.DeletionTimestamp != nil {
			continue
		}
		// The UID precondition makes sure we delete the object we looked
		// at, not a namesake created since.
		key := cache.MetaObjectToName(bar)
		c.trace.decision(key, "old Deployment after a rename: delete it", d.Name)
		start := time.Now()
		err := c.kubeclientset.AppsV1().Deployments(d.Namespace).Delete(ctx, d.Name,
			metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(d.UID))})
		c.trace.apiCall(key, "delete deployments/"+d.Name, start, nil, err)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deleting old Deployment %s: %w", d.Name, err)
		}
		c.recorder.Eventf(bar, corev1.EventTypeNormal, EventDeploymentDeleted,
			"Deleted Deployment %s: the Bar now names Deployment %s", d.Name, bar.Spec.DeploymentName)
		klog.FromContext(ctx).V(2).Info("Deleted old Deployment", "deployment", klog.KObj(d))
	}
	return nil
}

// updateStatus is the status step: write the Bar's status through the status
// subresource if, and only if, it would change.
func (c *Controller) updateStatus(ctx context.Context, bar *barv1alpha1.Bar, available int32, r readiness) error {
	key := cache.MetaObjectToName(bar)
	want := newStatus(bar, available, r, c.now())
	if !statusChanged(&bar.Status, &want) {
		c.trace.decision(key, "status unchanged: no write", r.reason)
		return nil
	}
	c.trace.decision(key, "status changed: write it", r.reason)
	start := time.Now()
	updated, err := c.barclientset.BarcontrollerV1alpha1().Bars(bar.Namespace).ApplyStatus(ctx,
		statusApplyConfiguration(bar, &want), metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	c.trace.apiCall(key, "apply bars/"+bar.Name+"/status", start, updated, err)
	if err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	c.writes.wrote(key, bar.UID, "bars", updated.ResourceVersion)

	// Problems are announced once, when the Bar enters them.
	if old := meta.FindStatusCondition(bar.Status.Conditions, barv1alpha1.ConditionReady); r.status == metav1.ConditionFalse &&
		(r.reason == barv1alpha1.ReasonDeploymentNotOwned || r.reason == barv1alpha1.ReasonApplyFailed) &&
		(old == nil || old.Reason != r.reason) {
		c.recorder.Event(bar, corev1.EventTypeWarning, r.reason, r.message)
	}
	return nil
}
