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
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// The objects the unit tests start from, and the requests a sync is
// expected to send for them, spelled out as a real API server would see
// them.

func newBar(name, deploymentName string, replicas int32) *barv1.Bar {
	return &barv1.Bar{
		TypeMeta: metav1.TypeMeta{APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID(name + "-uid"),
			Generation: 2, ResourceVersion: "10",
		},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: deploymentName}, Replicas: ptr.To(replicas), Template: barv1.BarPodTemplate{Image: "nginx:1.28.0"}},
	}
}

// appliedFieldsJSON is this controller's managedFields entry as a real API
// server (v1.37) records it after applying newDeployment, captured from
// one; %s is the Bar's UID.
const appliedFieldsJSON = `{"f:metadata":{"f:annotations":{"f:barcontroller.dev/desired-hash":{}},` +
	`"f:labels":{"f:app.kubernetes.io/managed-by":{},"f:barcontroller.dev/bar":{}},` +
	`"f:ownerReferences":{"k:{\"uid\":\"%s\"}":{}}},` +
	`"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:barcontroller.dev/bar":{}}},` +
	`"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`

// ownedDeployment is what the API server would hold after applying
// newDeployment(bar) and the Deployment controller settling it.
func ownedDeployment(bar *barv1.Bar) *appsv1.Deployment {
	want := desiredReplicas(bar)
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: bar.Spec.Deployment.Name, Namespace: bar.Namespace, UID: types.UID(bar.Spec.Deployment.Name + "-uid"),
			Generation: 1, ResourceVersion: "20",
			Labels: map[string]string{barLabel: bar.Name, managedByLabel: managedByValue, "team": "web"},
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1",
				desiredHashAnnotation: newDeployment(bar).Annotations[desiredHashAnnotation]},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(bar, barv1.SchemeGroupVersion.WithKind("Bar"))},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: fieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fmt.Sprintf(appliedFieldsJSON, bar.UID))},
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(want),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{barLabel: bar.Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{barLabel: bar.Name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: containerName, Image: desiredImage(bar), ImagePullPolicy: corev1.PullIfNotPresent,
				}}},
			},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
		},
	}
}

// Paths of fields newDeployment sets, in managedFields terms.
var (
	replicasPath = fieldpath.MakePathOrDie("spec", "replicas")
	imagePath    = fieldpath.MakePathOrDie("spec", "template", "spec", "containers", fieldpath.KeyByFields("name", containerName), "image")
)

// takenBy records in d's managedFields what the API server does when
// another client changes fields of ours with an update: the paths leave
// this controller's entry and go to manager's.
func takenBy(t testing.TB, d *appsv1.Deployment, manager string, paths ...fieldpath.Path) {
	t.Helper()
	taken := fieldpath.NewSet(paths...)
	for i, e := range d.ManagedFields {
		if !isOurWrite(e) {
			continue
		}
		ours := &fieldpath.Set{}
		if err := ours.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			t.Fatal(err)
		}
		raw, err := ours.Difference(taken).ToJSON()
		if err != nil {
			t.Fatal(err)
		}
		d.ManagedFields[i].FieldsV1 = &metav1.FieldsV1{Raw: raw}
	}
	if manager == "" { // removed: nobody owns it
		return
	}
	raw, err := taken.ToJSON()
	if err != nil {
		t.Fatal(err)
	}
	d.ManagedFields = append(d.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager,
		Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}})
}

// withStatus gives the Bar the status the controller would have written.
func withStatus(bar *barv1.Bar, available int32, status metav1.ConditionStatus, reason, message string) *barv1.Bar {
	bar.Status = barv1.BarStatus{
		ObservedGeneration: bar.Generation,
		AvailableReplicas:  available,
		Conditions: []metav1.Condition{{
			Type: barv1.ConditionReady, Status: status, Reason: reason, Message: message,
			ObservedGeneration: bar.Generation, LastTransitionTime: metav1.NewTime(fixedNow.Add(-time.Hour)),
		}},
	}
	return bar
}

func readyMessage(available, want int32, name string) string {
	return fmt.Sprintf("%d of %d replicas of Deployment %s are available", available, want, name)
}

// --- expected requests ---

// applyDeploymentAction is the forced apply that repairs a Deployment,
// carrying the resourceVersion and UID it was judged on as preconditions.
func applyDeploymentAction(bar *barv1.Bar, judged metav1.Object) core.Action {
	want := newDeployment(bar)
	if rv := judged.GetResourceVersion(); rv != "" {
		want.WithResourceVersion(rv).WithUID(judged.GetUID())
	}
	body, err := json.Marshal(want)
	if err != nil {
		panic(err)
	}
	return core.PatchActionImpl{
		ActionImpl: core.ActionImpl{Namespace: bar.Namespace, Verb: "patch",
			Resource: appsv1.SchemeGroupVersion.WithResource("deployments")},
		Name: bar.Spec.Deployment.Name, PatchType: types.ApplyPatchType, Patch: body,
		PatchOptions: metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)},
	}
}

// createDeploymentAction is the create of a Deployment the caches show
// nobody holds: newDeployment's content as an object.
func createDeploymentAction(bar *barv1.Bar) core.Action {
	d, err := deploymentObject(newDeployment(bar))
	if err != nil {
		panic(err)
	}
	return core.CreateActionImpl{
		ActionImpl: core.ActionImpl{Namespace: bar.Namespace, Verb: "create",
			Resource: appsv1.SchemeGroupVersion.WithResource("deployments")},
		Name: bar.Spec.Deployment.Name, Object: d,
		CreateOptions: metav1.CreateOptions{FieldManager: fieldManager},
	}
}

// applyStatusAction spells the status body out by hand rather than through
// statusApplyConfiguration, so a mistake there shows up here. The UID and
// resourceVersion of the Bar judged are preconditions: the API server
// refuses the status of a Bar deleted since for its namesake.
func applyStatusAction(bar *barv1.Bar, available int32, status metav1.ConditionStatus, reason, message string, transition metav1.Time) core.Action {
	body := map[string]interface{}{
		"apiVersion": "barcontroller.dev/v1", "kind": "Bar",
		"metadata": map[string]interface{}{"name": bar.Name, "namespace": bar.Namespace, "uid": string(bar.UID),
			"resourceVersion": bar.ResourceVersion},
		"status": map[string]interface{}{
			"observedGeneration": bar.Generation, "availableReplicas": available,
			"conditions": []interface{}{map[string]interface{}{
				"type": "Ready", "status": string(status), "reason": reason, "message": message,
				"observedGeneration": bar.Generation, "lastTransitionTime": transition.UTC().Format(time.RFC3339),
			}},
		},
	}
	raw, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return core.PatchActionImpl{
		ActionImpl: core.ActionImpl{Namespace: bar.Namespace, Verb: "patch", Subresource: "status",
			Resource: barv1.SchemeGroupVersion.WithResource("bars")},
		Name: bar.Name, PatchType: types.ApplyPatchType, Patch: raw,
		PatchOptions: metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)},
	}
}

// deleteDeploymentAction deletes d as the cache showed it: its UID and
// resourceVersion are preconditions.
func deleteDeploymentAction(d *appsv1.Deployment) core.Action {
	return core.DeleteActionImpl{
		ActionImpl: core.ActionImpl{Namespace: d.Namespace, Verb: "delete",
			Resource: appsv1.SchemeGroupVersion.WithResource("deployments")},
		Name:          d.Name,
		DeleteOptions: metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &d.UID, ResourceVersion: ptr.To(d.ResourceVersion)}},
	}
}

func keyOf(bar *barv1.Bar) cache.ObjectName { return cache.MetaObjectToName(bar) }
