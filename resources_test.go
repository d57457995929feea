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
	"os"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller/install"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// withResources returns bar with v1's spec.template.resources set.
func withResources(bar *barv1.Bar) *barv1.Bar {
	bar.Spec.Template.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	return bar
}

// resourcesPath is the managedFields path of one quantity of the
// container's resources ("requests" or "limits").
func resourcesPath(part string, name corev1.ResourceName) fieldpath.Path {
	return fieldpath.MakePathOrDie("spec", "template", "spec", "containers",
		fieldpath.KeyByFields("name", containerName), "resources", part, string(name))
}

// ownedDeploymentWithResources is ownedDeployment for a Bar with
// resources: the API server holds them, and this controller's apply entry
// owns each quantity.
func ownedDeploymentWithResources(t *testing.T, bar *barv1.Bar) *appsv1.Deployment {
	t.Helper()
	d := ownedDeployment(bar)
	d.Spec.Template.Spec.Containers[0].Resources = *bar.Spec.Template.Resources.DeepCopy()
	var paths []fieldpath.Path
	for name := range bar.Spec.Template.Resources.Requests {
		paths = append(paths, resourcesPath("requests", name))
	}
	for name := range bar.Spec.Template.Resources.Limits {
		paths = append(paths, resourcesPath("limits", name))
	}
	ours := &fieldpath.Set{}
	if err := ours.FromJSON(bytes.NewReader(d.ManagedFields[0].FieldsV1.Raw)); err != nil {
		t.Fatal(err)
	}
	raw, err := ours.Union(fieldpath.NewSet(paths...)).ToJSON()
	if err != nil {
		t.Fatal(err)
	}
	d.ManagedFields[0].FieldsV1 = &metav1.FieldsV1{Raw: raw}
	return d
}

func TestNewDeploymentResources(t *testing.T) {
	if r := newDeployment(newBar("test", "web", 1)).Spec.Template.Spec.Containers[0].Resources; r != nil {
		t.Errorf("a Bar without resources asks for resources %+v; the Deployment of a v1alpha1 release had none", r)
	}
	bar := withResources(newBar("test", "web", 1))
	r := newDeployment(bar).Spec.Template.Spec.Containers[0].Resources
	if r == nil || !equalQuantities(*r.Requests, bar.Spec.Template.Resources.Requests) || !equalQuantities(*r.Limits, bar.Spec.Template.Resources.Limits) {
		t.Errorf("resources %+v, want the Bar's %+v", r, bar.Spec.Template.Resources)
	}
	onlyLimits := newBar("test", "web", 1)
	onlyLimits.Spec.Template.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if r := newDeployment(onlyLimits).Spec.Template.Spec.Containers[0].Resources; r == nil || r.Requests != nil || r.Limits == nil {
		t.Errorf("limits only: resources %+v, want limits and no requests (the apply would own an empty map)", r)
	}
	if hash := func(b *barv1.Bar) string { return newDeployment(b).Annotations[desiredHashAnnotation] }; hash(bar) == hash(newBar("test", "web", 1)) {
		t.Error("resources do not change the desired hash")
	}
}

// TestDeploymentDriftResources: the resources a Bar asks for are the
// controller's fields like its image; resources it does not ask for are
// someone else's business, unless the controller applied them before.
func TestDeploymentDriftResources(t *testing.T) {
	const res = "spec.template.spec.containers[app].resources"
	tests := []struct {
		name  string
		have  *barv1.Bar // what the Deployment was applied from
		want  *barv1.Bar // what the Bar asks for now
		edit  func(*testing.T, *appsv1.Deployment)
		drift []string
	}{
		{"as applied", withResources(newBar("test", "web", 2)), nil, nil, nil},
		{"the API server's canonical form", withResources(newBar("test", "web", 2)), nil, func(_ *testing.T, d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0.1")
		}, nil},
		{"a limit set by kubectl set resources", withResources(newBar("test", "web", 2)), nil, func(t *testing.T, d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
			takenBy(t, d, "kubectl-set", resourcesPath("limits", corev1.ResourceMemory))
		}, []string{res}},
		{"a request rewritten by admission during our apply", withResources(newBar("test", "web", 2)), nil, func(_ *testing.T, d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m")
		}, nil},
		{"the Bar changed a request", withResources(newBar("test", "web", 2)), func() *barv1.Bar {
			b := withResources(newBar("test", "web", 2))
			b.Spec.Template.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
			return b
		}(), nil, []string{res}},
		{"the Bar no longer asks for resources it had", withResources(newBar("test", "web", 2)), newBar("test", "web", 2), nil, []string{res}},
		{"resources someone else set on a Bar without any", newBar("test", "web", 2), nil, func(t *testing.T, d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			takenBy(t, d, "kubectl-set", resourcesPath("limits", corev1.ResourceCPU))
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := ownedDeployment(tc.have)
			if len(tc.have.Spec.Template.Resources.Requests)+len(tc.have.Spec.Template.Resources.Limits) > 0 {
				d = ownedDeploymentWithResources(t, tc.have)
			}
			if tc.edit != nil {
				tc.edit(t, d)
			}
			want := tc.want
			if want == nil {
				want = tc.have
			}
			// Through the informer's transform, as the controller sees it.
			trimmed, err := trimDeployment(d)
			if err != nil {
				t.Fatal(err)
			}
			if got := deploymentDrift(newDeployment(want), trimmed.(*appsv1.Deployment)); !slices.Equal(got, tc.drift) {
				t.Errorf("deploymentDrift = %q, want %q", got, tc.drift)
			}
		})
	}
}

// TestUpgradeFromV1alpha1ReleaseFindsNoDrift: a Deployment exactly as the
// last v1alpha1-only release (5d53a73) applied it (its newDeployment, kept
// in testdata, owner reference apiVersion barcontroller.dev/v1alpha1 and
// the hash of that release), and its Bar read through v1 as the conversion
// webhook converts it: this controller finds nothing to write. An upgrade
// therefore writes no Deployment and restarts no Pod
// (test/e2e's upgrade test checks the same on a real API server).
func TestUpgradeFromV1alpha1ReleaseFindsNoDrift(t *testing.T) {
	raw, err := os.ReadFile("testdata/v1alpha1-release-deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	old := &barv1alpha1.Bar{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "example", UID: d.OwnerReferences[0].UID, Generation: 1},
		Spec:       barv1alpha1.BarSpec{DeploymentName: "example-app", Image: "nginx:1.28.0", Replicas: ptr.To[int32](2)},
	}
	scheme := runtime.NewScheme()
	install.Install(scheme)
	// Through the hub, as internal/conversion converts.
	var hub barcontroller.Bar
	bar := &barv1.Bar{}
	if err := scheme.Convert(old, &hub, nil); err != nil {
		t.Fatal(err)
	}
	if err := scheme.Convert(&hub, bar, nil); err != nil {
		t.Fatal(err)
	}
	if got := d.OwnerReferences[0].APIVersion; got != "barcontroller.dev/v1alpha1" {
		t.Fatalf("testdata's owner reference says %s; it must be what the v1alpha1 release wrote", got)
	}
	if drift := deploymentDrift(newDeployment(bar), &d); drift != nil {
		t.Errorf("deploymentDrift = %q after the upgrade, want nothing: every Deployment would be rewritten", drift)
	}
	// A real change does bring the owner reference to v1.
	bar.Spec.Replicas = ptr.To[int32](3)
	want := newDeployment(bar)
	if got := *want.OwnerReferences[0].APIVersion; got != barv1.SchemeGroupVersion.String() {
		t.Errorf("apply sends owner reference apiVersion %s, want %s", got, barv1.SchemeGroupVersion)
	}
}
