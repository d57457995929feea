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
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
)

// convergence watches the bench namespace and counts the Bars that are
// done: status.observedGeneration current, and a Deployment they control
// with the replicas and image they ask for.
//
// It counts as the events come, each rechecking the one Bar it concerns,
// rather than walking every Bar at each poll: the bench shares the two
// cores with the controller and the API server, and a walk of N Bars
// every poll was CPU the controller runs paid and the floors did not
// (docs/measurements/benchmarks-controller-cost-fourth-and-fifth-steps.md).
// Only when the count says every Bar is done does converged walk them all, to
// confirm it.
type convergence struct {
	barStore    cache.Indexer
	deployments cache.Indexer
	cancel      context.CancelFunc
	// watches and watchLists count the bench's own WATCH requests, and of
	// those the ones that list first (WatchList), so that what the API
	// server counted can be told apart from what the controller asked.
	watches, watchLists atomic.Int64

	mu    sync.Mutex
	done  map[string]bool // Bar key -> done, as last rechecked
	count atomic.Int64    // len(done)
	bars  atomic.Int64    // Bars in the store
}

// countWatches wraps a config's transport to count the WATCH requests
// sent through it into c.
func (c *convergence) countWatches(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if q := req.URL.Query(); q.Get("watch") == "true" {
				c.watches.Add(1)
				if q.Get("sendInitialEvents") == "true" {
					c.watchLists.Add(1)
				}
			}
			return rt.RoundTrip(req)
		})
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func watchConvergence(ctx context.Context, cfg *rest.Config, ns string) (*convergence, error) {
	ctx, cancel := context.WithCancel(ctx)
	// The bench's watch is overhead on the API server that the floor does
	// not pay: Deployments come as protobuf, the cheapest encoding the API
	// server has for them (Bars, a custom resource, have only JSON), and
	// neither stream gzipped (the API server compresses a WatchList stream
	// per event for a client that accepts gzip, options.go).
	c := &convergence{cancel: cancel, done: map[string]bool{}}
	kubeCfg, barCfg := rest.CopyConfig(cfg), rest.CopyConfig(cfg)
	kubeCfg.DisableCompression, barCfg.DisableCompression = true, true
	kubeCfg.ContentType = runtime.ContentTypeProtobuf
	kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.countWatches(kubeCfg)
	c.countWatches(barCfg)
	kf := kubeinformers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(kubeCfg), 0, kubeinformers.WithNamespace(ns))
	bf := informers.NewSharedInformerFactoryWithOptions(clientset.NewForConfigOrDie(barCfg), 0, informers.WithNamespace(ns))
	barInformer := bf.Barcontroller().V1().Bars().Informer()
	deploymentInformer := kf.Apps().V1().Deployments().Informer()
	c.barStore, c.deployments = barInformer.GetIndexer(), deploymentInformer.GetIndexer()
	// A handler runs after its store holds the change, so whichever of a
	// Bar's events comes last rechecks it against both stores as they are.
	onBar := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.recheck(key)
		}
	}
	onDeployment := func(obj interface{}) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if d, ok := obj.(*appsv1.Deployment); ok {
			if ref := metav1.GetControllerOf(d); ref != nil && ref.Kind == "Bar" {
				c.recheck(d.Namespace + "/" + ref.Name)
			}
		}
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{barInformer, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { c.bars.Add(1); onBar(obj) },
			UpdateFunc: func(_, obj interface{}) { onBar(obj) },
			DeleteFunc: func(obj interface{}) { c.bars.Add(-1); onBar(obj) },
		}},
		{deploymentInformer, cache.ResourceEventHandlerFuncs{
			AddFunc: onDeployment,
			// The old owner too: a Deployment whose controller reference
			// moved leaves its old Bar no longer done.
			UpdateFunc: func(old, obj interface{}) { onDeployment(old); onDeployment(obj) },
			DeleteFunc: onDeployment,
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			cancel()
			return nil, err
		}
	}
	kf.Start(ctx.Done())
	bf.Start(ctx.Done())
	for _, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("deployment cache did not sync")
		}
	}
	for _, ok := range bf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("bar cache did not sync")
		}
	}
	return c, nil
}

// recheck judges one Bar again, and keeps the count.
func (c *convergence) recheck(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok, _ := c.barStore.GetByKey(key)
	now := ok && c.isDone(o.(*barv1.Bar))
	switch {
	case now && !c.done[key]:
		c.done[key] = true
		c.count.Add(1)
	case !now && c.done[key]:
		delete(c.done, key)
		c.count.Add(-1)
	}
}

func (c *convergence) isDone(bar *barv1.Bar) bool {
	if bar.Status.ObservedGeneration != bar.Generation {
		return false
	}
	o, ok, _ := c.deployments.GetByKey(bar.Namespace + "/" + bar.Spec.Deployment.Name)
	if !ok {
		return false
	}
	dep := o.(*appsv1.Deployment)
	return metav1.IsControlledBy(dep, bar) && ptr.Deref(dep.Spec.Replicas, 1) == ptr.Deref(bar.Spec.Replicas, 1) &&
		len(dep.Spec.Template.Spec.Containers) == 1 && dep.Spec.Template.Spec.Containers[0].Image == bar.Spec.Template.Image
}

// converged is how many Bars are done: the events' count, and once that
// says all of them, a walk of every Bar that confirms it.
func (c *convergence) converged() int {
	n := c.count.Load()
	if n < c.bars.Load() {
		return int(n)
	}
	done := 0
	for _, o := range c.barStore.List() {
		if c.isDone(o.(*barv1.Bar)) {
			done++
		}
	}
	return done
}

func (c *convergence) stop() { c.cancel() }

// pollInterval is how often converged is asked: each call reads two
// counts until the last Bar is done.
const pollInterval = 20 * time.Millisecond
