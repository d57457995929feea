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
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// This file holds the first step of every event's path: informer event
// handlers that turn a changed object into the key of the Bar to sync. Each
// handler registration runs on its own listener goroutine
// (processorListener.run in client-go's tools/cache/shared_informer.go),
// not the informer's: a slow handler backs up only its own listener's
// buffer, which grows without bound. So they only look things up in caches
// and enqueue; all API calls happen in the workers.

const (
	// barsByDeploymentName indexes Bars by "namespace/spec.deployment.name",
	// so a Deployment the Bar does not own (one in the way, or one that just
	// went away) still leads back to the Bars that want its name.
	barsByDeploymentName = "barsByDeploymentName"
	// deploymentsByBarUID indexes Deployments by the UID of the Bar that
	// controls them, so a Bar finds all its Deployments without listing
	// the namespace.
	deploymentsByBarUID = "deploymentsByBarUID"
)

func indexBarByDeploymentName(obj interface{}) ([]string, error) {
	bar, ok := obj.(*barv1.Bar)
	if !ok || bar.Spec.Deployment.Name == "" {
		return nil, nil
	}
	return []string{bar.Namespace + "/" + bar.Spec.Deployment.Name}, nil
}

func indexDeploymentByBarUID(obj interface{}) ([]string, error) {
	d, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if ref := metav1.GetControllerOf(d); ref != nil && isBarRef(ref) {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// isBarRef reports whether an owner reference points at a Bar. The group is
// compared, not just the kind, because any API group may have a kind named
// Bar; the version is not, so references written by other versions of this
// API still count.
func isBarRef(ref *metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && ref.Kind == "Bar" && gv.Group == barv1.SchemeGroupVersion.Group
}

// addBar and updateBar enqueue on every event, resyncs included: the sync is
// level-triggered and costs no API call when nothing changed. A resync replays
// the cache (only a relist repairs a missed watch event): each Bar syncs again.
// isInInitialList is true for the Adds of the informer's first list, the
// ones HasSynced waits for (only --trace shows it).
func (c *Controller) addBar(obj interface{}, isInInitialList bool) {
	bar := obj.(*barv1.Bar)
	key := cache.MetaObjectToName(bar)
	c.trace.event("addBar", bar, "", isInInitialList, key, "self")
	c.enqueue(key)
}

func (c *Controller) updateBar(oldObj, newObj interface{}) {
	bar := newObj.(*barv1.Bar)
	key := cache.MetaObjectToName(bar)
	c.trace.event("updateBar", bar, oldObj.(*barv1.Bar).ResourceVersion, false, key, "self")
	c.enqueue(key)
}

// deleteBar enqueues a deleted Bar once more. Its Deployments need nothing:
// the garbage collector removes them through the ownerReference
// newDeployment sets. But the write tracker may still hold the Bar's last
// writes (freshness.go), and only a sync that finds the Bar gone forgets
// them: without this one, nothing would ever sync that key again. (Forgetting
// here instead would race with a sync of the Bar still in progress, which
// records its writes after.)
func (c *Controller) deleteBar(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	bar, ok := obj.(*barv1.Bar)
	if !ok {
		utilruntime.HandleErrorWithLogger(c.logger, nil, "Unexpected object in Bar delete event", "type", fmt.Sprintf("%T", obj))
		return
	}
	key := cache.MetaObjectToName(bar)
	c.trace.event("deleteBar", bar, "", false, key, "self")
	c.enqueue(key)
}

// The Deployment handlers serve both Deployment informers (main.go): the
// full one of the Deployments the controller manages, whose spec and
// status changes the syncs compare against, and the metadata-only one of
// every other Deployment, so every name a Bar may want is seen. One change
// enqueues its Bar twice (the controller reference and the name index in
// handleDeployment; both informers only while its label changes); the work
// queue keeps one copy of a waiting key, so that is usually one sync.

func (c *Controller) addDeployment(obj interface{}, isInInitialList bool) {
	if d, err := meta.Accessor(obj); err == nil {
		c.handleDeployment("addDeployment", d, "", isInInitialList)
	}
}

func (c *Controller) updateDeployment(oldObj, newObj interface{}) {
	oldD, err := meta.Accessor(oldObj)
	if err != nil {
		return
	}
	newD, err := meta.Accessor(newObj)
	if err != nil {
		return
	}
	if oldD.GetResourceVersion() == newD.GetResourceVersion() {
		// No change: a periodic resync, or a relist handing back one held.
		return
	}
	// If the controller changed, the Bar that lost it must hear about it too.
	if oldRef, newRef := metav1.GetControllerOfNoCopy(oldD), metav1.GetControllerOfNoCopy(newD); oldRef != nil &&
		(newRef == nil || oldRef.UID != newRef.UID) {
		c.handleDeployment("updateDeployment", oldD, "", false)
	}
	c.handleDeployment("updateDeployment", newD, oldD.GetResourceVersion(), false)
}

func (c *Controller) deleteDeployment(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// The watch missed the delete; the informer hands over the last
		// state it knew inside a tombstone.
		obj = tombstone.Obj
	}
	d, err := meta.Accessor(obj)
	if err != nil {
		utilruntime.HandleErrorWithLogger(c.logger, err, "Unexpected object in Deployment delete event", "type", fmt.Sprintf("%T", obj))
		return
	}
	c.handleDeployment("deleteDeployment", d, "", false)
}

// handleDeployment enqueues every Bar a Deployment matters to: the Bar that
// controls it, and any Bar whose spec.deployment.name is its name (which may
// be blocked by it, or free to create it now that it is gone). handler,
// oldRV and initialList only describe the event to --trace.
func (c *Controller) handleDeployment(handler string, d metav1.Object, oldRV string, initialList bool) {
	if ref := metav1.GetControllerOfNoCopy(d); ref != nil {
		if bar := c.resolveControllerRef(d.GetNamespace(), ref); bar != nil {
			key := cache.MetaObjectToName(bar)
			c.trace.event(handler, d, oldRV, initialList, key, "controllerRef")
			c.enqueue(key)
		}
	}
	bars, err := c.barsIndexer.ByIndex(barsByDeploymentName, d.GetNamespace()+"/"+d.GetName())
	if err != nil {
		utilruntime.HandleErrorWithLogger(c.logger, err, "Looking up Bars by Deployment name failed", "deployment", klog.KObj(d))
		return
	}
	for _, obj := range bars {
		key := cache.MetaObjectToName(obj.(*barv1.Bar))
		c.trace.event(handler, d, oldRV, initialList, key, "nameIndex")
		c.enqueue(key)
	}
}

// resolveControllerRef returns the Bar a controller reference points at, or
// nil if it points at something else or at a Bar that no longer exists (a
// new Bar with the same name has another UID and does not own the object).
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *barv1.Bar {
	if !isBarRef(ref) {
		return nil
	}
	bar, err := c.barsLister.Bars(namespace).Get(ref.Name)
	if err != nil || bar.UID != ref.UID {
		return nil
	}
	return bar
}

// enqueue is the second step: it puts the Bar's namespace/name on the work
// queue, which collapses repeated keys until a worker takes them. The key,
// not the object: by the time a worker runs, the cache may hold a newer
// version, and the sync must act on that one.
func (c *Controller) enqueue(key cache.ObjectName) {
	c.logger.V(5).Info("Enqueued Bar", "bar", key)
	waiting := c.trace.adding(key)
	c.queue.Add(key)
	c.trace.added(key, waiting)
}
