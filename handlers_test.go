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
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// TestDeploymentEventsFindTheirBar is the table test for the owner lookup:
// which Bars a Deployment event enqueues.
func TestDeploymentEventsFindTheirBar(t *testing.T) {
	owner := newBar("owner", "web", 1)
	wanting := newBar("wanting", "web", 1) // same deploymentName, does not own it
	other := newBar("other", "api", 1)
	ref := func(apiVersion, kind, name, uid string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(controller)}
	}
	tests := []struct {
		name string
		refs []metav1.OwnerReference
		dep  string
		want []string
	}{
		{"controlled by a Bar", []metav1.OwnerReference{ref("barcontroller.dev/v1", "Bar", "owner", "owner-uid", true)}, "api",
			[]string{"default/owner", "default/other"}},
		{"controlled by a Bar of another API version", []metav1.OwnerReference{ref("barcontroller.dev/v2", "Bar", "owner", "owner-uid", true)}, "api",
			[]string{"default/owner", "default/other"}},
		{"a Bar kind from another group", []metav1.OwnerReference{ref("example.com/v1", "Bar", "owner", "owner-uid", true)}, "api",
			[]string{"default/other"}},
		{"owner reference that is not the controller", []metav1.OwnerReference{ref("barcontroller.dev/v1", "Bar", "owner", "owner-uid", false)}, "api",
			[]string{"default/other"}},
		{"a previous Bar with the same name", []metav1.OwnerReference{ref("barcontroller.dev/v1", "Bar", "owner", "old-uid", true)}, "api",
			[]string{"default/other"}},
		{"a Bar that does not exist", []metav1.OwnerReference{ref("barcontroller.dev/v1", "Bar", "gone", "gone-uid", true)}, "none",
			nil},
		{"unowned, name wanted by two Bars", nil, "web", []string{"default/owner", "default/wanting"}},
		{"unowned, name nobody wants", nil, "none", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			f.bars = append(f.bars, owner, wanting, other)
			c := f.newController(ctx)
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: tc.dep, Namespace: "default", OwnerReferences: tc.refs}}

			// Every kind of event takes the same path, tombstones included.
			for _, event := range []func(){
				func() { c.addDeployment(d, false) },
				func() { c.deleteDeployment(d) },
				func() { c.deleteDeployment(cache.DeletedFinalStateUnknown{Key: "default/" + tc.dep, Obj: d}) },
			} {
				event()
				got := map[string]bool{}
				for c.queue.Len() > 0 {
					key, _ := c.queue.Get()
					got[key.String()] = true
					c.queue.Done(key)
				}
				if len(got) != len(tc.want) {
					t.Errorf("enqueued %v, want %v", got, tc.want)
				}
				for _, w := range tc.want {
					if !got[w] {
						t.Errorf("enqueued %v, want %v", got, tc.want)
					}
				}
			}
		})
	}
}

func TestDeploymentResyncIsIgnored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("owner", "web", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	d := ownedDeployment(bar)
	c.updateDeployment(d, d)
	if n := c.queue.Len(); n != 0 {
		t.Errorf("a resync of an unchanged Deployment enqueued %d keys", n)
	}
	changed := d.DeepCopy()
	changed.ResourceVersion = "21"
	c.updateDeployment(d, changed)
	if n := c.queue.Len(); n != 1 {
		t.Errorf("a changed Deployment enqueued %d keys, want 1", n)
	}
}

func TestReleasedDeploymentNotifiesFormerOwner(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	bar := newBar("owner", "api", 1)
	f.bars = append(f.bars, bar)
	c := f.newController(ctx)
	oldD := ownedDeployment(bar)
	oldD.Name = "orphaned"
	newD := oldD.DeepCopy()
	newD.ResourceVersion = "21"
	newD.OwnerReferences = nil
	c.updateDeployment(oldD, newD)
	if n := c.queue.Len(); n != 1 {
		t.Fatalf("enqueued %d keys, want the former owner", n)
	}
	if key, _ := c.queue.Get(); key != keyOf(bar) {
		t.Errorf("enqueued %v, want %v", key, keyOf(bar))
	}
}
