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
	"strconv"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
)

// The fake clientsets keep the resourceVersion a write does not set; a
// real API server moves it on every change, which is how the controller
// tells a write that changed something from one that did not, and how it
// knows its caches have caught up with its own writes (freshness.go). The
// reactors here answer as a real API server would.

// bumpResourceVersion answers a patch of an existing object with its
// resourceVersion moved on by one, as a real API server does when the
// patch changes the object.
func bumpResourceVersion(tracker core.ObjectTracker) core.ReactionFunc {
	return func(action core.Action) (bool, runtime.Object, error) {
		patch, ok := action.(core.PatchAction)
		if !ok {
			return false, nil, nil
		}
		before, err := tracker.Get(action.GetResource(), action.GetNamespace(), patch.GetName())
		if err != nil {
			return false, nil, nil // a create: the default reactor answers
		}
		m, _ := meta.Accessor(before)
		rv, err := strconv.Atoi(m.GetResourceVersion())
		if err != nil {
			return false, nil, nil
		}
		return stampResourceVersion(tracker, strconv.Itoa(rv+1))(action)
	}
}

// createWithResourceVersion stores a created object with a
// resourceVersion, as a real API server does; the fake's own create keeps
// it empty, and the controller waits for its caches to reach the
// resourceVersion of its own writes (freshness.go).
// What it creates goes to the metadata tracker as well if it lacks the
// managed-by label, as main.go's selectors split them.
func createWithResourceVersion(tracker, metaTracker core.ObjectTracker) core.ReactionFunc {
	var next atomic.Int64
	next.Store(100)
	return func(action core.Action) (bool, runtime.Object, error) {
		create, ok := action.(core.CreateActionImpl)
		if !ok {
			return false, nil, nil
		}
		// A copy: the action the test reads back stays as sent.
		obj := create.Object.DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return false, nil, nil
		}
		m.SetResourceVersion(strconv.FormatInt(next.Add(1), 10))
		create.Object = obj
		handled, out, err := core.ObjectReaction(tracker)(create)
		if err == nil && !managed(obj.(*appsv1.Deployment)) {
			err = metaTracker.Create(appsv1.SchemeGroupVersion.WithResource("deployments"), &metav1.PartialObjectMetadata{
				TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: obj.(*appsv1.Deployment).ObjectMeta}, m.GetNamespace())
		}
		return handled, out, err
	}
}

func stampResourceVersion(tracker core.ObjectTracker, rv string) core.ReactionFunc {
	return func(action core.Action) (bool, runtime.Object, error) {
		handled, obj, err := core.ObjectReaction(tracker)(action)
		if m, merr := meta.Accessor(obj); err == nil && merr == nil {
			m.SetResourceVersion(rv)
		}
		return handled, obj, err
	}
}

// managed says which of main.go's two Deployment watches selects d: the
// full one (managedSelector) or the metadata one (othersSelector).
func managed(d *appsv1.Deployment) bool {
	return mustSelector(managedSelector).Matches(labels.Set(d.Labels))
}

func mustSelector(s string) labels.Selector {
	sel, err := labels.Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}
