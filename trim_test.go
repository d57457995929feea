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
	"fmt"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// serverDeployment is ownedDeployment as the API server returns it: with
// the fields it defaults, other writers' annotations and managedFields.
func serverDeployment(bar *barv1.Bar) *appsv1.Deployment {
	d := ownedDeployment(bar)
	// As a plain create records it (an Update entry): the fields the API
	// server defaulted are owned too.
	d.ManagedFields[0].Operation = metav1.ManagedFieldsOperationUpdate
	d.ManagedFields[0].FieldsV1 = &metav1.FieldsV1{Raw: []byte(fmt.Sprintf(createdFieldsJSON, bar.UID))}
	d.Status.Conditions = []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", Message: `ReplicaSet "web-1" has successfully progressed.`},
	}
	d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"apiVersion":"apps/v1","kind":"Deployment"}`
	d.ManagedFields = append(d.ManagedFields,
		metav1.ManagedFieldsEntry{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"},
		metav1.ManagedFieldsEntry{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationApply, Subresource: "status"})
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("25%")), MaxUnavailable: ptr.To(intstr.FromString("25%"))}}
	d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-02T03:04:05Z"}
	spec := &d.Spec.Template.Spec
	spec.RestartPolicy, spec.DNSPolicy, spec.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, corev1.DefaultSchedulerName
	spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	spec.SecurityContext = &corev1.PodSecurityContext{}
	spec.Containers = append(spec.Containers, corev1.Container{Name: "sidecar", Image: "registry.example/sidecar:1"})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.ImagePullPolicy, c.TerminationMessagePath = corev1.PullIfNotPresent, corev1.TerminationMessagePathDefault
		c.Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}
	}
	return d
}

// createdFieldsJSON is the managedFields entry of a create of
// newDeployment's Deployment: appliedFieldsJSON and the fields the API
// server defaulted.
const createdFieldsJSON = `{"f:metadata":{"f:annotations":{".":{},"f:barcontroller.dev/desired-hash":{}},` +
	`"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:barcontroller.dev/bar":{}},` +
	`"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}},` +
	`"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},` +
	`"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},` +
	`"f:template":{"f:metadata":{"f:labels":{".":{},"f:barcontroller.dev/bar":{}}},` +
	`"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},` +
	`"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},` +
	`"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}`

// TestTrimDeployment: the cache's copy of a managed Deployment gives the
// same drift and the same readiness as the whole object, whatever drifted,
// and holds none of what the controller does not read.
func TestTrimDeployment(t *testing.T) {
	bar := newBar("test", "web", 2)
	tests := []struct {
		name  string
		drift func(*appsv1.Deployment)
	}{
		{"as desired", func(*appsv1.Deployment) {}},
		{"replicas scaled by hand", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](5) }},
		{"image changed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0" }},
		{"image set by kubectl", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0"
			takenBy(t, d, "kubectl-set", imagePath)
		}},
		{"container renamed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" }},
		{"label removed", func(d *appsv1.Deployment) { delete(d.Labels, managedByLabel) }},
		{"pod label removed", func(d *appsv1.Deployment) { d.Spec.Template.Labels = nil }},
		{"selector widened", func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpExists}}
		}},
		{"blockOwnerDeletion dropped", func(d *appsv1.Deployment) { d.OwnerReferences[0].BlockOwnerDeletion = nil }},
		{"not available yet", func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 0 }},
		{"rollout not observed", func(d *appsv1.Deployment) { d.Generation = 7 }},
		{"progress deadline exceeded", func(d *appsv1.Deployment) {
			d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing,
				Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "ReplicaSet web-1 has timed out progressing."})
		}},
	}
	want := newDeployment(bar)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := serverDeployment(bar)
			tc.drift(d)
			full := d.DeepCopy()
			obj, err := trimDeployment(d)
			if err != nil {
				t.Fatal(err)
			}
			trimmed := obj.(*appsv1.Deployment)
			if got, wantDiff := deploymentDrift(want, trimmed), deploymentDrift(want, full); !reflect.DeepEqual(got, wantDiff) {
				t.Errorf("drift of the trimmed copy: %v, of the whole: %v", got, wantDiff)
			}
			if got, wantR := deploymentReadiness(bar, trimmed), deploymentReadiness(bar, full); got != wantR {
				t.Errorf("readiness of the trimmed copy: %+v, of the whole: %+v", got, wantR)
			}
			if trimmed.Name != full.Name || trimmed.Namespace != full.Namespace || trimmed.UID != full.UID ||
				trimmed.ResourceVersion != full.ResourceVersion || !reflect.DeepEqual(trimmed.OwnerReferences, full.OwnerReferences) {
				t.Errorf("identity or owners lost: %+v", trimmed.ObjectMeta)
			}
			if len(trimmed.Annotations) != 1 || len(trimmed.ManagedFields) != 1 || !isOurWrite(trimmed.ManagedFields[0]) ||
				trimmed.Spec.Template.Annotations != nil ||
				trimmed.Spec.Strategy.RollingUpdate != nil || trimmed.Spec.Template.Spec.RestartPolicy != "" ||
				slices.ContainsFunc(trimmed.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Ports != nil || c.Name != containerName }) ||
				bytes.Contains(trimmed.ManagedFields[0].FieldsV1.Raw, []byte("f:strategy")) ||
				bytes.Contains(trimmed.ManagedFields[0].FieldsV1.Raw, []byte("f:dnsPolicy")) ||
				slices.ContainsFunc(trimmed.Status.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Status == corev1.ConditionTrue }) {
				t.Errorf("kept what the controller never reads: %+v", trimmed)
			}
			again, _ := trimDeployment(trimmed.DeepCopy())
			if !reflect.DeepEqual(again, trimmed) {
				t.Errorf("not idempotent (WatchList applies the transform twice)")
			}
		})
	}
	if obj, _ := trimDeployment(cache.DeletedFinalStateUnknown{Key: "x"}); obj == nil {
		t.Error("a tombstone was dropped")
	}
}

// TestTrimDeploymentMetadata: of every Deployment, the metadata cache keeps
// what tells the controller who holds a name, and nothing else.
func TestTrimDeploymentMetadata(t *testing.T) {
	bar := newBar("owner", "web", 1)
	barRef := *metav1.NewControllerRef(bar, barv1.SchemeGroupVersion.WithKind("Bar"))
	plainRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm-uid"}
	gone := metav1.Now()
	tests := []struct {
		name     string
		refs     []metav1.OwnerReference
		wantRefs []metav1.OwnerReference
	}{
		{"a Bar's", []metav1.OwnerReference{plainRef, barRef}, []metav1.OwnerReference{barRef}},
		{"nobody's", nil, nil},
		{"owned, with no controller", []metav1.OwnerReference{plainRef}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
				Name: "web", Namespace: bar.Namespace, UID: "d-uid", ResourceVersion: "42", Generation: 3,
				DeletionTimestamp: &gone,
				Labels:            map[string]string{"app": "web"}, Annotations: map[string]string{"note": "big"},
				ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
				OwnerReferences: tc.refs,
			}}
			obj, err := trimDeploymentMetadata(in)
			if err != nil {
				t.Fatal(err)
			}
			want := metav1.ObjectMeta{Name: "web", Namespace: bar.Namespace, UID: "d-uid", ResourceVersion: "42",
				DeletionTimestamp: &gone, OwnerReferences: tc.wantRefs}
			if got := obj.(*metav1.PartialObjectMetadata).ObjectMeta; !reflect.DeepEqual(got, want) {
				t.Errorf("kept\n%+v\nwant\n%+v", got, want)
			}
		})
	}
	if obj, _ := trimDeploymentMetadata(cache.DeletedFinalStateUnknown{Key: "x"}); obj == nil {
		t.Error("a tombstone was dropped")
	}
}

// BenchmarkTrimDeployment is the transform's cost per watch event of a
// managed Deployment, its managedFields pruning included.
func BenchmarkTrimDeployment(b *testing.B) {
	d := serverDeployment(newBar("test", "web", 2))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := trimDeployment(d.DeepCopy()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDriftPrefixesCoverDesiredFields: every field whose ownership
// deploymentDrift asks about survives pruneOwnedFields, resources
// included; a field added to desiredFields without a prefix fails here.
func TestDriftPrefixesCoverDesiredFields(t *testing.T) {
	bar := newBar("test", "web", 2)
	bar.Spec.Template.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	for _, f := range desiredFields(newDeployment(bar)) {
		if !underDriftPrefix(f.path) {
			t.Errorf("%s (%s) is pruned from the cache's managedFields", f.name, f.path)
		}
	}
}

// underDriftPrefix is whether p begins with one of driftPrefixes.
func underDriftPrefix(p fieldpath.Path) bool {
	for _, prefix := range driftPrefixes {
		if len(p) < len(prefix) {
			continue
		}
		match := true
		for i, pe := range prefix {
			if pe != nil && !p[i].Equals(*pe) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
