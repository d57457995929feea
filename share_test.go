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
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// TestTrimBar: the Bar cache keeps all of a Bar but its managedFields,
// annotations and labels (trimBar says why), and what the controller makes
// of a Bar is the same.
func TestTrimBar(t *testing.T) {
	full := newBar("web", "web", 3)
	full.Labels = map[string]string{"team": "web"}
	full.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"barcontroller.dev/v1"}`}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	full.Status = newStatus(full, 3, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "3 of 3"}, metav1.Now())

	obj, err := trimBar(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*barv1.Bar)
	want := full.DeepCopy()
	want.Annotations, want.ManagedFields, want.Labels = nil, nil, nil
	if !reflect.DeepEqual(trimmed, want) {
		t.Errorf("kept\n%+v\nwant\n%+v", trimmed, want)
	}
	if !reflect.DeepEqual(newDeployment(trimmed), newDeployment(full)) {
		t.Error("the desired Deployment of the trimmed Bar differs")
	}
	if again, _ := trimBar(trimmed.DeepCopy()); !reflect.DeepEqual(again, trimmed) {
		t.Error("not idempotent (WatchList applies the transform twice)")
	}
	if obj, _ := trimBar(cache.DeletedFinalStateUnknown{Key: "x"}); obj == nil {
		t.Error("a tombstone was dropped")
	}
}

// TestTransformsShareStrings: two objects decoded apart (each with copies
// of its own, as from the API server) hold one copy of the strings every
// object repeats once through the transforms, and still their own of the
// strings that are one per object.
func TestTransformsShareStrings(t *testing.T) {
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	decodeDeployment := func(bar *barv1.Bar) *appsv1.Deployment {
		raw, err := serverDeployment(bar).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		d := &appsv1.Deployment{}
		if err := d.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
		obj, err := trimDeployment(d)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*appsv1.Deployment)
	}
	bar1, bar2 := newBar("one", "one", 1), newBar("two", "two", 1)
	d1, d2 := decodeDeployment(bar1), decodeDeployment(bar2)
	for _, tc := range []struct {
		name   string
		a, b   string
		shared bool
	}{
		{"namespace", d1.Namespace, d2.Namespace, true},
		{"owner API version", d1.OwnerReferences[0].APIVersion, d2.OwnerReferences[0].APIVersion, true},
		{"owner kind", d1.OwnerReferences[0].Kind, d2.OwnerReferences[0].Kind, true},
		{"image", d1.Spec.Template.Spec.Containers[0].Image, d2.Spec.Template.Spec.Containers[0].Image, true},
		{"container name", d1.Spec.Template.Spec.Containers[0].Name, d2.Spec.Template.Spec.Containers[0].Name, true},
		{"manager", d1.ManagedFields[0].Manager, d2.ManagedFields[0].Manager, true},
		{"managed-by value", d1.Labels[managedByLabel], d2.Labels[managedByLabel], true},
		{"label key", labelKey(d1.Labels, barLabel), labelKey(d2.Labels, barLabel), true},
		{"selector key", labelKey(d1.Spec.Selector.MatchLabels, barLabel), labelKey(d2.Labels, barLabel), true},
		// Within one object: the Bar's name, as label and owner.
		{"bar label and name", d1.Labels[barLabel], d1.Name, true},
		{"owner name and name", d1.OwnerReferences[0].Name, d1.Name, true},
		{"selector value and name", d1.Spec.Selector.MatchLabels[barLabel], d1.Name, true},
		// One per object: never in the table.
		{"UID", string(d1.OwnerReferences[0].UID), string(d2.OwnerReferences[0].UID), false},
	} {
		if tc.a != tc.b && tc.shared {
			t.Fatalf("%s: %q and %q differ, the fixture is wrong", tc.name, tc.a, tc.b)
		}
		if same(tc.a, tc.b) != tc.shared {
			t.Errorf("%s: shared %v, want %v", tc.name, !tc.shared, tc.shared)
		}
	}
	if d1.ManagedFields[0].Time != nil {
		t.Error("the managedFields entry kept its time")
	}

	decodeBar := func(bar *barv1.Bar) *barv1.Bar {
		bar.Status = newStatus(bar, 1, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "ready"}, metav1.Now())
		raw, err := json.Marshal(bar)
		if err != nil {
			t.Fatal(err)
		}
		out := &barv1.Bar{}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
		obj, err := trimBar(out)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*barv1.Bar)
	}
	b1, b2 := decodeBar(bar1), decodeBar(bar2)
	c1, c2 := b1.Status.Conditions[0], b2.Status.Conditions[0]
	for name, pair := range map[string][2]string{
		"namespace": {b1.Namespace, b2.Namespace}, "kind": {b1.Kind, b2.Kind}, "apiVersion": {b1.APIVersion, b2.APIVersion},
		"image": {b1.Spec.Template.Image, b2.Spec.Template.Image}, "condition type": {c1.Type, c2.Type},
		"condition reason": {c1.Reason, c2.Reason}, "condition status": {string(c1.Status), string(c2.Status)},
		"Deployment name and name": {b1.Spec.Deployment.Name, b1.Name},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("Bars: %s not shared", name)
		}
	}
}

func labelKey(m map[string]string, key string) string {
	for k := range m {
		if k == key {
			return k
		}
	}
	return ""
}

// TestSharingSurvivesATenantsDistinctImages: one tenant's Bars, each with
// an image of its own and more of them than the table has room for, pass
// through the Bar transform; the Bars of another tenant decoded after
// them still share their namespace and their image, and what the
// controller writes itself (the Ready condition's type and reason) stays
// shared throughout.
func TestSharingSurvivesATenantsDistinctImages(t *testing.T) {
	decode := func(bar *barv1.Bar) *barv1.Bar {
		raw, err := json.Marshal(bar)
		if err != nil {
			t.Fatal(err)
		}
		out := &barv1.Bar{}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
		obj, err := trimBar(out)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*barv1.Bar)
	}
	bar := func(ns, name, image string) *barv1.Bar {
		b := newBar(name, name, 1)
		b.Namespace, b.Spec.Template.Image = ns, image
		b.Status = newStatus(b, 1, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "ready"}, fixedNow)
		return b
	}
	for i := range 5000 {
		decode(bar("tenant-a", fmt.Sprint("a", i), fmt.Sprintf("registry.tenant-a.example/app-%d:1.0", i)))
	}
	b1, b2 := decode(bar("tenant-b", "b1", "nginx:1.29.0")), decode(bar("tenant-b", "b2", "nginx:1.29.0"))
	c1, c2 := b1.Status.Conditions[0], b2.Status.Conditions[0]
	for name, pair := range map[string][2]string{
		"namespace": {b1.Namespace, b2.Namespace}, "image": {b1.Spec.Template.Image, b2.Spec.Template.Image},
		"condition type": {c1.Type, c2.Type}, "condition reason": {c1.Reason, c2.Reason},
	} {
		if unsafe.StringData(pair[0]) != unsafe.StringData(pair[1]) {
			t.Errorf("after 5,000 Bars of distinct images: %s %q not shared", name, pair[0])
		}
	}
}
