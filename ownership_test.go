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
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// TestDeploymentDrift: drift is judged by who owns the fields the Bar
// decides, and by values only when what the Bar wants changed since the
// last apply. The managedFields are what a real API server records
// (ownedDeployment; takenBy for another client's update).
func TestDeploymentDrift(t *testing.T) {
	const image = "spec.template.spec.containers[app]"
	bar := newBar("test", "web", 2)
	changed := newBar("test", "web", 2)
	changed.Spec.Template.Image = "nginx:1.29.0"
	tests := []struct {
		name string
		bar  *barv1.Bar // what the Deployment is compared with; bar if nil
		edit func(*appsv1.Deployment)
		want []string
	}{
		{"as applied", nil, func(*appsv1.Deployment) {}, nil},
		{"image rewritten by admission during our apply", nil, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
		}, nil},
		{"sidecar and labels injected by admission", nil, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy", Image: "envoy:1.30"})
			d.Labels["injected"] = "yes"
		}, nil},
		{"image set by kubectl", nil, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0"
			takenBy(t, d, "kubectl-set", imagePath)
		}, []string{image}},
		{"scaled", nil, func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](5)
			takenBy(t, d, "kubectl", replicasPath)
		}, []string{"spec.replicas"}},
		{"scaled to the value the Bar wants: nothing to put back", nil, func(d *appsv1.Deployment) {
			takenBy(t, d, "kubectl", replicasPath)
		}, nil},
		{"image set by kubectl, replicas rewritten by admission", nil, func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](3)
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0"
			takenBy(t, d, "kubectl-set", imagePath)
		}, []string{image}},
		{"pod label removed", nil, func(d *appsv1.Deployment) {
			delete(d.Spec.Template.Labels, barLabel)
			takenBy(t, d, "", fieldpath.MakePathOrDie("spec", "template", "metadata", "labels", barLabel))
		}, []string{"spec.template.metadata.labels"}},
		{"the Bar changed its image", changed, func(*appsv1.Deployment) {}, []string{image}},
		{"the Bar changed its image, the old one rewritten by admission", changed, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
		}, []string{image}},
		{"the Bar changed back to what the Deployment has", nil, func(d *appsv1.Deployment) {
			d.Annotations[desiredHashAnnotation] = "from-another-spec"
		}, nil},
		{"from a controller before the hash, unchanged", nil, func(d *appsv1.Deployment) {
			delete(d.Annotations, desiredHashAnnotation)
		}, nil},
		{"from a controller before the hash, scaled by a fight it lost", nil, func(d *appsv1.Deployment) {
			delete(d.Annotations, desiredHashAnnotation)
			d.Spec.Replicas = ptr.To[int32](7)
		}, []string{"spec.replicas"}},
		{"created (not applied) by this controller, image rewritten by admission", nil, func(d *appsv1.Deployment) {
			d.ManagedFields[0].Operation = metav1.ManagedFieldsOperationUpdate
			d.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
		}, nil},
		{"created by this controller, then scaled", nil, func(d *appsv1.Deployment) {
			d.ManagedFields[0].Operation = metav1.ManagedFieldsOperationUpdate
			d.Spec.Replicas = ptr.To[int32](5)
			takenBy(t, d, "kubectl", replicasPath)
		}, []string{"spec.replicas"}},
		{"created, then repaired by an apply: the fields of both entries are ours", nil, func(d *appsv1.Deployment) {
			created := d.ManagedFields[0]
			created.Operation = metav1.ManagedFieldsOperationUpdate
			d.ManagedFields = append(d.ManagedFields, created)
			// The repair's apply took the image back; the create's entry
			// keeps the rest.
			takenBy(t, d, "", imagePath)
			d.ManagedFields[0].FieldsV1 = fieldsJSON(t, imagePath)
			d.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
		}, nil},
		{"a status write's Update entry is not ours", nil, func(d *appsv1.Deployment) {
			d.ManagedFields[0].Operation = metav1.ManagedFieldsOperationUpdate
			d.ManagedFields[0].Subresource = "status"
			d.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
		}, []string{image}},
		{"never applied by this controller, image differs", nil, func(d *appsv1.Deployment) {
			d.ManagedFields = nil
			d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0"
		}, []string{image}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := ownedDeployment(bar)
			tc.edit(d)
			b := tc.bar
			if b == nil {
				b = bar
			}
			if got := deploymentDrift(newDeployment(b), d); !slices.Equal(got, tc.want) {
				t.Errorf("deploymentDrift = %q, want %q", got, tc.want)
			}
			// As the sync calls it, the hash left to compute.
			if got := deploymentDrift(desiredDeployment(b), d); !slices.Equal(got, tc.want) {
				t.Errorf("deploymentDrift without the hash = %q, want %q", got, tc.want)
			}
		})
	}
}

func fieldsJSON(t *testing.T, paths ...fieldpath.Path) *metav1.FieldsV1 {
	t.Helper()
	raw, err := fieldpath.NewSet(paths...).ToJSON()
	if err != nil {
		t.Fatal(err)
	}
	return &metav1.FieldsV1{Raw: raw}
}

// The hash covers everything the apply sends, and only that.
func TestDesiredHash(t *testing.T) {
	hash := func(b *barv1.Bar) string { return newDeployment(b).Annotations[desiredHashAnnotation] }
	bar := newBar("test", "web", 2)
	if hash(bar) != hash(newBar("test", "web", 2)) {
		t.Error("equal Bars give different hashes")
	}
	for name, edit := range map[string]func(*barv1.Bar){
		"replicas": func(b *barv1.Bar) { b.Spec.Replicas = ptr.To[int32](3) },
		"image":    func(b *barv1.Bar) { b.Spec.Template.Image = "nginx:1.29.0" },
		"uid":      func(b *barv1.Bar) { b.UID = "other" },
	} {
		b := newBar("test", "web", 2)
		edit(b)
		if hash(b) == hash(bar) {
			t.Errorf("a changed %s keeps the hash", name)
		}
	}
	b := newBar("test", "web", 2)
	b.Status.AvailableReplicas, b.ResourceVersion = 2, "99"
	if hash(b) != hash(bar) {
		t.Error("status or resourceVersion changed the hash: every status write would look like a new spec")
	}
}

// What judging drift by ownership costs per sync: nothing more than
// comparing values (deploymentDiff) while the values are as wanted;
// parsing the managedFields entry when admission rewrote them.
func BenchmarkDeploymentDrift(b *testing.B) {
	bar := newBar("test", "web", 2)
	want, have := newDeployment(bar), ownedDeployment(bar)
	rewritten := ownedDeployment(bar)
	rewritten.Spec.Template.Spec.Containers[0].Image = "mirror.example/nginx:1.28.0"
	b.Run("converged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if deploymentDrift(want, have) != nil {
				b.Fatal("drift")
			}
		}
	})
	b.Run("rewritten by admission", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if deploymentDrift(want, rewritten) != nil {
				b.Fatal("drift")
			}
		}
	})
	b.Run("values only, converged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if deploymentDiff(want, have) != nil {
				b.Fatal("drift")
			}
		}
	})
}
