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
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// bloat is how many of each thing a writer adds: with the longest valid
// label keys and values, 3,000 labels are about 1.1 MB, within the API
// server's 1.5 MiB for one object.
const bloat = 3000

// longKey is the i-th of bloat distinct keys of the longest valid form: a
// 253-byte prefix and a 63-byte name.
func longKey(i int) string {
	return strings.Repeat("p", 249) + ".dev/" + fmt.Sprintf("n%04d", i) + strings.Repeat("n", 58)
}

func longValue(i int) string { return fmt.Sprintf("v%04d", i) + strings.Repeat("v", 58) }

func jsonSize(t *testing.T, obj any) int {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

// TestTrimIsBoundedWhateverOthersWrite: what the full Deployment cache
// keeps of a Deployment with the managed-by label does not grow with what
// its author or other writers put in it, nor does what the Bar cache keeps
// of a Bar with its author's. Anyone who may create a Deployment may set
// that label, and before the bounds a replica held every label, owner
// reference, container and resource of such Deployments whole: 2 MB of
// heap for each of 1.35 MB, the memory limit at about 450 of them (issue
// 39, fourteenth review, M1). Where the controller reads something, the
// trimmed copy must still give the drift and the readiness the whole one
// does.
func TestTrimIsBoundedWhateverOthersWrite(t *testing.T) {
	bar := newBar("test", "web", 2)
	want := newDeployment(bar)
	const maxKept = 64 << 10 // the app container's resources at maxKeptResources, and the rest
	tests := []struct {
		name  string
		bloat func(*appsv1.Deployment)
		// forged: the controller's manager name on an entry it did not
		// write; the trimmed copy prunes that entry, or drops it when
		// what is left is still too long, so drift may differ.
		forged bool
		// dropped: the forged entry is dropped (one of the controller's
		// entries is kept, its create's).
		dropped bool
		// foreign: another controller's Deployment, whose reference the
		// readiness message would quote whole.
		foreign bool
	}{
		{"labels", func(d *appsv1.Deployment) {
			for i := range bloat {
				d.Labels[longKey(i)] = longValue(i)
			}
		}, false, false, false},
		{"selector and pod labels", func(d *appsv1.Deployment) {
			for i := range bloat {
				d.Spec.Selector.MatchLabels[longKey(i)] = longValue(i)
				d.Spec.Template.Labels[longKey(i)] = longValue(i)
			}
		}, false, false, false},
		{"owner references", func(d *appsv1.Deployment) {
			for i := range bloat {
				d.OwnerReferences = append(d.OwnerReferences, metav1.OwnerReference{APIVersion: "example.dev/v1", Kind: "Thing",
					Name: longValue(i), UID: types.UID(fmt.Sprintf("uid-%d", i))})
			}
		}, false, false, false},
		{"containers", func(d *appsv1.Deployment) {
			for i := range bloat / 3 {
				d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers,
					corev1.Container{Name: fmt.Sprintf("c%d", i), Image: longKey(i)})
			}
		}, false, false, false},
		{"resources of the controller's container", func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec.Containers[0]
			c.Resources.Requests, c.Resources.Limits = corev1.ResourceList{}, corev1.ResourceList{}
			for i := range bloat {
				c.Resources.Requests[corev1.ResourceName(longKey(i))] = resource.MustParse("1")
				c.Resources.Limits[corev1.ResourceName(longKey(i))] = resource.MustParse("1")
			}
		}, false, false, false},
		{"another writer's managedFields", func(d *appsv1.Deployment) {
			d.ManagedFields = append(d.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: labelsOwned(bloat)}})
		}, false, false, false},
		{"managedFields under the controller's name", func(d *appsv1.Deployment) {
			d.ManagedFields = append(d.ManagedFields, metav1.ManagedFieldsEntry{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationApply,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: labelsOwned(bloat)}})
		}, true, false, false},
		{"an Apply and an Update under the controller's name, each just under the old bound", func(d *appsv1.Deployment) {
			refs := make([]string, 0, 860)
			for i := range cap(refs) {
				refs = append(refs, fmt.Sprintf(`"k:{\"uid\":\"%048d\"}":{}`, i))
			}
			raw := []byte(`{"f:metadata":{"f:ownerReferences":{` + strings.Join(refs, ",") + `}}}`)
			d.ManagedFields = append(d.ManagedFields,
				metav1.ManagedFieldsEntry{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}},
				metav1.ManagedFieldsEntry{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}})
		}, true, false, false},
		{"unreadable managedFields under the controller's name", func(d *appsv1.Deployment) {
			d.ManagedFields = append(d.ManagedFields, metav1.ManagedFieldsEntry{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"unknown":"` + strings.Repeat("x", bloat*100) + `"}`)}})
		}, true, true, false},
		// The API server checks no length of an owner reference's strings,
		// nor of an image (fifteenth review, C1: 1 MiB kinds were kept, and
		// held by the intern table after their Deployments were gone).
		{"the controller reference's strings", func(d *appsv1.Deployment) {
			huge := strings.Repeat("k", 1<<20)
			d.OwnerReferences = []metav1.OwnerReference{{APIVersion: huge, Kind: huge, Name: huge, UID: types.UID(huge), Controller: ptr.To(true)}}
		}, false, false, true},
		{"the image", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = strings.Repeat("i", 1<<20)
		}, false, false, false},
		{"the desired-hash annotation", func(d *appsv1.Deployment) {
			d.Annotations[desiredHashAnnotation] = strings.Repeat("h", 200<<10)
		}, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := serverDeployment(bar)
			tc.bloat(d)
			full := d.DeepCopy()
			before := jsonSize(t, full)
			if before < 100<<10 {
				t.Fatalf("the bloated Deployment is only %d bytes", before)
			}
			obj, err := trimDeployment(d)
			if err != nil {
				t.Fatal(err)
			}
			trimmed := obj.(*appsv1.Deployment)
			if after := jsonSize(t, trimmed); after > maxKept {
				t.Errorf("kept %d bytes of a Deployment of %d; at most %d", after, before, maxKept)
			}
			if !tc.forged {
				if got, wantDrift := deploymentDrift(want, trimmed), deploymentDrift(want, full); !reflect.DeepEqual(got, wantDrift) {
					t.Errorf("drift of the trimmed copy: %v, of the whole: %v", got, wantDrift)
				}
			} else if tc.dropped && len(trimmed.ManagedFields) != 1 {
				t.Errorf("kept %d entries under the controller's name, want only its create's", len(trimmed.ManagedFields))
			}
			if tc.foreign {
				meta, _ := trimDeploymentMetadata(&metav1.PartialObjectMetadata{ObjectMeta: full.ObjectMeta})
				if after := jsonSize(t, meta); after > 4<<10 {
					t.Errorf("the metadata cache kept %d bytes of it", after)
				}
				return
			}
			if got, wantR := deploymentReadiness(bar, trimmed), deploymentReadiness(bar, full); got != wantR {
				t.Errorf("readiness of the trimmed copy: %+v, of the whole: %+v", got, wantR)
			}
			if metav1.GetControllerOfNoCopy(trimmed) == nil || metav1.GetControllerOfNoCopy(trimmed).UID != bar.UID {
				t.Errorf("lost the controller reference: %+v", trimmed.OwnerReferences)
			}
			again, _ := trimDeployment(trimmed.DeepCopy())
			if !reflect.DeepEqual(again, trimmed) {
				t.Errorf("not idempotent (WatchList applies the transform twice)")
			}
		})
	}

	t.Run("a Bar", func(t *testing.T) {
		b := bar.DeepCopy()
		b.Labels = map[string]string{}
		for i := range bloat {
			b.Labels[longKey(i)] = longValue(i)
			b.Finalizers = append(b.Finalizers, longKey(i))
			b.Status.Conditions = append(b.Status.Conditions, metav1.Condition{Type: longKey(i), Status: metav1.ConditionTrue, Reason: "R", Message: longValue(i)})
		}
		ready := metav1.Condition{Type: barv1.ConditionReady, Status: metav1.ConditionTrue, Reason: barv1.ReasonDeploymentAvailable, Message: "ok"}
		b.Status.Conditions = append(b.Status.Conditions, ready)
		before := jsonSize(t, b)
		obj, err := trimBar(b.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		trimmed := obj.(*barv1.Bar)
		if after := jsonSize(t, trimmed); after > 4<<10 {
			t.Errorf("kept %d bytes of a Bar of %d; at most 4 KiB", after, before)
		}
		if len(trimmed.Status.Conditions) != 1 || trimmed.Status.Conditions[0] != ready {
			t.Errorf("conditions kept: %+v, want only Ready", trimmed.Status.Conditions)
		}
		// What the sync reads of the Bar is what it read of the whole.
		now := metav1.Now()
		r := readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "ok"}
		if statusChanged(&trimmed.Status, ptr.To(newStatus(trimmed, 2, r, now))) != statusChanged(&b.Status, ptr.To(newStatus(b, 2, r, now))) {
			t.Error("the trimmed Bar's status judged otherwise than the whole's")
		}
		again, _ := trimBar(trimmed.DeepCopy())
		if !reflect.DeepEqual(again, trimmed) {
			t.Errorf("not idempotent (WatchList applies the transform twice)")
		}
	})
}

// labelsOwned is a managedFields entry that owns n long labels.
func labelsOwned(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:labels":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"f:%s":{}`, longKey(i))
	}
	b.WriteString(`}}}`)
	return []byte(b.String())
}
