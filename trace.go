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
	"path"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// The --trace flag follows the Bars whose "namespace/name" matches a
// pattern through every step of the controller: the informer event and the
// handler that took it, the enqueue, the wait in the queue, the sync and
// what it decided, each API call and how long it took, the status write or
// why there was none, and the waits for a stale cache. It is how
// docs/informer-internals.md shows the machinery on a real run.
//
// Off (the default), the controller's trace field is nil and every method
// below returns at its first line. The methods take plain values, never
// ...any, so that a call with tracing off builds no argument list either.

// tracer writes one log line per step for the Bars it matches.
type tracer struct {
	pattern string
	logger  klog.Logger
	depth   func() int // the work queue's length

	mu sync.Mutex
	// queued holds, per traced key, when it was first added since a
	// worker last took it: the work queue keeps a key once however often
	// it is added, so the wait starts at the first add.
	queued map[cache.ObjectName]time.Time
}

// newTracer returns nil, tracing nothing, for an empty pattern. A pattern
// is matched against "namespace/name" with path.Match: "*" stops at the
// "/", so "default/*" is every Bar in default and "*/web" every Bar named
// web.
func newTracer(pattern string, logger klog.Logger, depth func() int) (*tracer, error) {
	if pattern == "" {
		return nil, nil
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("--trace=%q: %w", pattern, err)
	}
	return &tracer{pattern: pattern, logger: logger.WithName("trace"), depth: depth,
		queued: map[cache.ObjectName]time.Time{}}, nil
}

func (t *tracer) matches(key cache.ObjectName) bool {
	if t == nil {
		return false
	}
	ok, _ := path.Match(t.pattern, key.Namespace+"/"+key.Name)
	return ok
}

// event: an informer delivered obj to one of the handlers in handlers.go
// (named by handler), which maps it to the Bar bar. via says how: "self"
// for a Bar's own events, "controllerRef" or "nameIndex" for a Deployment's.
// oldRV is the resourceVersion the cache held before an update ("" for adds
// and deletes); equal to the new one, no change: a resync or a relist.
func (t *tracer) event(handler string, obj metav1.Object, oldRV string, initialList bool, bar cache.ObjectName, via string) {
	if !t.matches(bar) {
		return
	}
	kv := []any{"bar", bar, "handler", handler, "object", klog.KObj(obj), "resourceVersion", obj.GetResourceVersion(), "via", via}
	switch {
	case oldRV != "" && oldRV == obj.GetResourceVersion():
		kv = append(kv, "resync", true)
	case oldRV != "":
		kv = append(kv, "oldResourceVersion", oldRV)
	case initialList:
		kv = append(kv, "initialList", true)
	}
	t.logger.Info("Event", kv...)
}

// adding, just before the key goes on the work queue, notes when it was
// first added and reports whether it is waiting there already. It runs
// before the add so that a worker can never take the key before it is noted.
func (t *tracer) adding(key cache.ObjectName) (waiting bool) {
	if !t.matches(key) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, waiting = t.queued[key]; !waiting {
		t.queued[key] = time.Now()
	}
	return waiting
}

// added: the key is on the work queue. collapsed means it was waiting there
// already, and the queue kept one copy.
func (t *tracer) added(key cache.ObjectName, collapsed bool) {
	if !t.matches(key) {
		return
	}
	t.logger.Info("Enqueued", "bar", key, "queueDepth", t.depth(), "collapsed", collapsed)
}

// dequeued: a worker took the key; waited is the time since its first add.
func (t *tracer) dequeued(key cache.ObjectName, requeues int) {
	if !t.matches(key) {
		return
	}
	t.mu.Lock()
	added, ok := t.queued[key]
	delete(t.queued, key)
	t.mu.Unlock()
	kv := []any{"bar", key, "queueDepth", t.depth(), "requeues", requeues}
	if ok {
		kv = append(kv, "waited", time.Since(added))
	}
	t.logger.Info("Dequeued", kv...)
}

// decision: what the sync found and what it will do about it.
func (t *tracer) decision(key cache.ObjectName, what, detail string) {
	if !t.matches(key) {
		return
	}
	if detail == "" {
		t.logger.Info("Sync", "bar", key, "decision", what)
		return
	}
	t.logger.Info("Sync", "bar", key, "decision", what, "detail", detail)
}

// read: the sync started from what the caches hold now, which may be newer
// than the event that queued the key (deployment is nil if there is none).
func (t *tracer) read(key cache.ObjectName, bar *barv1.Bar, deployment *appsv1.Deployment) {
	if !t.matches(key) {
		return
	}
	kv := []any{"bar", key, "barResourceVersion", bar.ResourceVersion, "generation", bar.Generation,
		"deployment", bar.Spec.Deployment.Name}
	if deployment != nil {
		kv = append(kv, "deploymentResourceVersion", deployment.ResourceVersion)
	} else {
		kv = append(kv, "deploymentResourceVersion", "none")
	}
	t.logger.Info("Sync started", kv...)
}

// apiCall: one request to the API server, how long it took, and the
// resourceVersion of what it returned (what freshness.go waits for).
func (t *tracer) apiCall(key cache.ObjectName, call string, start time.Time, result any, err error) {
	if !t.matches(key) {
		return
	}
	took := time.Since(start)
	if err != nil {
		t.logger.Info("API call failed", "bar", key, "call", call, "took", took, "err", err)
		return
	}
	var rv string
	switch o := result.(type) {
	case *appsv1.Deployment:
		if o != nil {
			rv = o.ResourceVersion
		}
	case *barv1.Bar:
		if o != nil {
			rv = o.ResourceVersion
		}
	}
	t.logger.Info("API call", "bar", key, "call", call, "took", took, "resourceVersion", rv)
}

// synced: the sync ended with result ("success", "error", "stale_cache").
func (t *tracer) synced(key cache.ObjectName, start time.Time, result string, err error) {
	if !t.matches(key) {
		return
	}
	if err != nil {
		t.logger.Info("Sync done", "bar", key, "took", time.Since(start), "result", result, "err", err)
		return
	}
	t.logger.Info("Sync done", "bar", key, "took", time.Since(start), "result", result)
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
