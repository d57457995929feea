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
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := barv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newBar(name, deployment string) *barv1.Bar {
	return &barv1.Bar{
		TypeMeta:   metav1.TypeMeta{APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"), Generation: 1},
		Spec: barv1.BarSpec{
			Replicas:   ptr.To[int32](2),
			Deployment: barv1.BarDeployment{Name: deployment},
			Template:   barv1.BarPodTemplate{Image: "nginx:1.29.0"},
		},
	}
}

// wantFor is the whole Deployment a Bar asks for, written out by hand.
func wantFor(bar *barv1.Bar, image string, replicas int32, label string) *appsv1.Deployment {
	sel := map[string]string{barLabel: label}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: bar.Spec.Deployment.Name, Namespace: bar.Namespace,
			Labels: map[string]string{managedByLabel: managedByValue, barLabel: label},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "barcontroller.dev/v1", Kind: "Bar", Name: bar.Name, UID: bar.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

func TestMutateDeploymentForANewBar(t *testing.T) {
	long := strings.Repeat("a", 60) + "-" + strings.Repeat("b", 40)
	withResources := newBar("web", "web")
	withResources.Spec.Template.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	wantResources := wantFor(withResources, "nginx:1.29.0", 2, "web")
	wantResources.Spec.Template.Spec.Containers[0].Resources = withResources.Spec.Template.Resources
	defaulted := newBar("web", "web")
	defaulted.Spec.Replicas, defaulted.Spec.Template.Image = nil, ""
	longBar := newBar(long, "web")

	for _, tc := range []struct {
		name string
		bar  *barv1.Bar
		want *appsv1.Deployment
	}{
		{"plain", newBar("web", "front"), wantFor(newBar("web", "front"), "nginx:1.29.0", 2, "web")},
		{"resources", withResources, wantResources},
		{"API defaults", defaulted, wantFor(defaulted, barv1.DefaultImage, 1, "web")},
		// 63 characters at most: the start of the name and a hash of all
		// of it (the first 10 hex digits of its SHA-256).
		{"long name", longBar, wantFor(longBar, "nginx:1.29.0", 2, strings.Repeat("a", 52)+"-888de1050b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deploymentFor(tc.bar)
			if err := mutateDeployment(tc.bar, d, testScheme(t)); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(d, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", d, tc.want)
			}
		})
	}
	// The cut must not leave a '-' before the separator.
	cut := strings.Repeat("a", 51) + "-" + strings.Repeat("b", 40)
	if v, want := labelValue(cut), strings.Repeat("a", 51)+"-d89feb7851"; v != want {
		t.Errorf("labelValue(%q) = %q, want %q", cut, v, want)
	}
}

// TestMutateDeploymentOfAnExistingOne: fields the Bar does not decide
// (API defaults, others' labels, another container) stay, so a Deployment
// as wanted compares equal and CreateOrUpdate writes nothing.
func TestMutateDeploymentOfAnExistingOne(t *testing.T) {
	bar := newBar("web", "web")
	bar.Spec.Template.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.1")}
	stored := wantFor(bar, "nginx:1.29.0", 2, "web")
	stored.Labels["team"] = "x"
	stored.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	c := &stored.Spec.Template.Spec.Containers[0]
	c.ImagePullPolicy, c.TerminationMessagePath = corev1.PullIfNotPresent, "/dev/termination-log"
	c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")} // as the API server stores 0.1
	stored.Spec.Template.Spec.Containers = append(stored.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy:1"})

	for _, tc := range []struct {
		name   string
		edit   func(*barv1.Bar)
		change func(*appsv1.Deployment)
	}{
		{"as wanted", func(*barv1.Bar) {}, func(*appsv1.Deployment) {}},
		{"new image", func(b *barv1.Bar) { b.Spec.Template.Image = "nginx:1.30.0" },
			func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.30.0" }},
		{"scaled", func(b *barv1.Bar) { b.Spec.Replicas = ptr.To[int32](0) },
			func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) }},
		{"resources dropped", func(b *barv1.Bar) { b.Spec.Template.Resources = corev1.ResourceRequirements{} },
			func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bar.DeepCopy()
			tc.edit(b)
			got, want := stored.DeepCopy(), stored.DeepCopy()
			tc.change(want)
			if err := mutateDeployment(b, got, testScheme(t)); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestDeploymentReadiness(t *testing.T) {
	bar := newBar("web", "web")
	for _, tc := range []struct {
		name       string
		replicas   int32
		status     appsv1.DeploymentStatus
		generation int64
		want       string
	}{
		{"new", 2, appsv1.DeploymentStatus{}, 1, barv1.ReasonReplicasUnavailable},
		{"available", 2, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}, 1, barv1.ReasonDeploymentAvailable},
		{"not observed yet", 2, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}, 2, barv1.ReasonReplicasUnavailable},
		{"rolling", 2, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 1, AvailableReplicas: 2}, 1, barv1.ReasonReplicasUnavailable},
		{"zero", 0, appsv1.DeploymentStatus{ObservedGeneration: 1}, 1, barv1.ReasonScaledToZero},
		{"stuck", 2, appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}}, 1, barv1.ReasonProgressDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bar.DeepCopy()
			b.Spec.Replicas = &tc.replicas
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: tc.generation}, Status: tc.status}
			if got := deploymentReadiness(b, d); got.reason != tc.want {
				t.Errorf("reason %s (%s), want %s", got.reason, got.message, tc.want)
			}
		})
	}
}
