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
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

func TestNewDeployment(t *testing.T) {
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 100)
	tests := []struct {
		name         string
		bar          *barv1.Bar
		wantReplicas int32
		wantImage    string
		wantLabel    string
	}{
		{"as specified", newBar("test", "web", 3), 3, "nginx:1.28.0", "test"},
		{"scaled to zero", newBar("test", "web", 0), 0, "nginx:1.28.0", "test"},
		{"defaults when admission did not run", func() *barv1.Bar {
			b := newBar("test", "web", 1)
			b.Spec.Replicas, b.Spec.Template.Image = nil, ""
			return b
		}(), 1, barv1.DefaultImage, "test"},
		{"custom image", func() *barv1.Bar {
			b := newBar("test", "web", 1)
			b.Spec.Template.Image = "registry.example.com:5000/team/app@sha256:" + strings.Repeat("0", 64)
			return b
		}(), 1, "registry.example.com:5000/team/app@sha256:" + strings.Repeat("0", 64), "test"},
		{"name too long for a label", newBar(long, "web", 1), 1, "nginx:1.28.0", labelValue(long)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDeployment(tc.bar)
			if *d.Name != tc.bar.Spec.Deployment.Name || *d.Namespace != tc.bar.Namespace {
				t.Errorf("name %s/%s, want %s/%s", *d.Namespace, *d.Name, tc.bar.Namespace, tc.bar.Spec.Deployment.Name)
			}
			if got := *d.Spec.Replicas; got != tc.wantReplicas {
				t.Errorf("replicas %d, want %d", got, tc.wantReplicas)
			}
			c := d.Spec.Template.Spec.Containers
			if len(c) != 1 || *c[0].Name != containerName || *c[0].Image != tc.wantImage {
				t.Errorf("containers %+v, want one %q running %q", c, containerName, tc.wantImage)
			}
			selector := d.Spec.Selector.MatchLabels
			if len(selector) != 1 || selector[barLabel] != tc.wantLabel {
				t.Errorf("selector %v, want {%s: %s}", selector, barLabel, tc.wantLabel)
			}
			for k, v := range selector {
				if d.Spec.Template.Labels[k] != v || d.Labels[k] != v {
					t.Errorf("label %s=%s missing from Deployment %v or template %v", k, v, d.Labels, d.Spec.Template.Labels)
				}
			}
			if errs := validation.IsValidLabelValue(tc.wantLabel); len(errs) > 0 {
				t.Errorf("label value %q is invalid: %v", tc.wantLabel, errs)
			}
			if d.Labels[managedByLabel] != managedByValue {
				t.Errorf("labels %v lack %s=%s", d.Labels, managedByLabel, managedByValue)
			}
			refs := d.OwnerReferences
			if len(refs) != 1 || *refs[0].UID != tc.bar.UID || *refs[0].Kind != "Bar" ||
				*refs[0].APIVersion != "barcontroller.dev/v1" || *refs[0].Name != tc.bar.Name ||
				!*refs[0].Controller || !*refs[0].BlockOwnerDeletion {
				t.Errorf("ownerReferences %+v, want one controller reference to the Bar blocking deletion", refs)
			}
		})
	}
}

func TestLabelValue(t *testing.T) {
	tests := []struct{ name, want string }{
		{"web", "web"},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
		// 64 characters: cut to 52, "-", 10 hash characters.
		{strings.Repeat("a", 64), strings.Repeat("a", 52) + "-" + labelValue(strings.Repeat("a", 64))[53:]},
		// The cut lands just after a '.', which must not end the prefix.
		{strings.Repeat("a", 51) + ".b" + strings.Repeat("c", 20), strings.Repeat("a", 51) + "-" + labelValue(strings.Repeat("a", 51) + ".b" + strings.Repeat("c", 20))[52:]},
	}
	for _, tc := range tests {
		got := labelValue(tc.name)
		if got != tc.want {
			t.Errorf("labelValue(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q is not a valid label value: %v", tc.name, got, errs)
		}
	}
	// Long names that share a prefix must still differ.
	a, b := strings.Repeat("x", 70)+"a", strings.Repeat("x", 70)+"b"
	if labelValue(a) == labelValue(b) {
		t.Errorf("labelValue collides for %q and %q", a, b)
	}
}

func TestDeploymentDiff(t *testing.T) {
	bar := newBar("test", "web", 2)
	tests := []struct {
		name   string
		mutate func(*appsv1.Deployment)
		want   []string
	}{
		{"identical", func(*appsv1.Deployment) {}, nil},
		{"fields others own are ignored", func(d *appsv1.Deployment) {
			d.Annotations = map[string]string{"note": "added by hand"}
			d.Labels["extra"] = "x"
			d.Spec.Template.Labels["extra"] = "x"
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, d.Spec.Template.Spec.Containers[0])
			d.Spec.Template.Spec.Containers[1].Name = "sidecar"
			d.Spec.Template.Spec.Containers[1].Image = "busybox:1.36"
			d.OwnerReferences = append(d.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "x"})
		}, nil},
		{"replicas differ", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](1) }, []string{"spec.replicas"}},
		{"replicas unset", func(d *appsv1.Deployment) { d.Spec.Replicas = nil }, []string{"spec.replicas"}},
		{"image differs", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0" },
			[]string{"spec.template.spec.containers[app]"}},
		{"container renamed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" },
			[]string{"spec.template.spec.containers[app]"}},
		{"label removed", func(d *appsv1.Deployment) { delete(d.Labels, managedByLabel) }, []string{"metadata.labels"}},
		{"template label changed", func(d *appsv1.Deployment) { d.Spec.Template.Labels[barLabel] = "x" },
			[]string{"spec.template.metadata.labels"}},
		{"selector widened", func(d *appsv1.Deployment) { d.Spec.Selector.MatchLabels["extra"] = "x" }, []string{"spec.selector"}},
		{"selector expression added", func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpExists}}
		}, []string{"spec.selector"}},
		{"blockOwnerDeletion dropped", func(d *appsv1.Deployment) { d.OwnerReferences[0].BlockOwnerDeletion = nil },
			[]string{"metadata.ownerReferences"}},
		{"scaled and relabelled", func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](9)
			delete(d.Labels, barLabel)
		}, []string{"metadata.labels", "spec.replicas"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := ownedDeployment(bar)
			tc.mutate(d)
			if got := deploymentDiff(newDeployment(bar), d); !slices.Equal(got, tc.want) {
				t.Errorf("deploymentDiff = %q, want %q", got, tc.want)
			}
		})
	}
}

// The CRD's default image (applied at admission) and DefaultImage (used when
// admission did not run) must not drift apart.
func TestCRDDefaultImageMatchesConstant(t *testing.T) {
	raw, err := os.ReadFile("artifacts/crd/barcontroller.dev_bars.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	// The CRD lists every version of the API; the controller reads v1.
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == barv1.SchemeGroupVersion.Version
	})
	if i < 0 {
		t.Fatalf("the CRD has no version %s", barv1.SchemeGroupVersion.Version)
	}
	spec := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	if got := string(spec["template"].Properties["image"].Default.Raw); got != `"`+barv1.DefaultImage+`"` {
		t.Errorf("CRD default image %s, DefaultImage %q", got, barv1.DefaultImage)
	}
	if got := string(spec["replicas"].Default.Raw); got != "1" {
		t.Errorf("CRD default replicas %s, want 1 (desiredReplicas falls back to 1)", got)
	}
}

// deploymentObject must send exactly what the apply configuration says:
// a create of it leaves nothing for drift detection to put back.
func TestDeploymentObjectIsTheApplyConfiguration(t *testing.T) {
	withResources := newBar("test", "web", 3)
	withResources.Spec.Template.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	onlyLimits := newBar(strings.Repeat("a-long-bar-name-", 5), "web", 0)
	onlyLimits.Spec.Template.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5")}
	for _, bar := range []*barv1.Bar{newBar("test", "web", 1), withResources, onlyLimits} {
		want := newDeployment(bar)
		d, err := deploymentObject(want)
		if err != nil {
			t.Fatal(err)
		}
		if diff := deploymentDiff(want, d); len(diff) != 0 {
			t.Errorf("%s: the created object differs from the apply configuration in %v", bar.Name, diff)
		}
		if d.Annotations[desiredHashAnnotation] != want.Annotations[desiredHashAnnotation] || d.Annotations[desiredHashAnnotation] == "" {
			t.Errorf("%s: desired hash %q, want %q", bar.Name, d.Annotations[desiredHashAnnotation], want.Annotations[desiredHashAnnotation])
		}
		if d.Name != bar.Spec.Deployment.Name || d.Namespace != bar.Namespace {
			t.Errorf("%s: created %s/%s", bar.Name, d.Namespace, d.Name)
		}
		// Field by field: the apply configuration's JSON read as a
		// Deployment is the object, whatever newDeployment sets.
		raw, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var fromJSON appsv1.Deployment
		if err := json.Unmarshal(raw, &fromJSON); err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if wantJSON, _ := json.Marshal(&fromJSON); !bytes.Equal(got, wantJSON) {
			t.Errorf("%s: created\n%s\nwant\n%s", bar.Name, got, wantJSON)
		}
	}
}

// TestSelectorsSplitDeployments: every Deployment is in exactly one of the
// two Deployment caches (main.go), whatever its labels: a Deployment in
// neither would look absent to every sync, one in both would be decoded
// twice and make the write tracker wait on the wrong cache.
func TestSelectorsSplitDeployments(t *testing.T) {
	managed, others := mustSelector(managedSelector), mustSelector(othersSelector)
	for _, tc := range []struct {
		name    string
		labels  labels.Set
		managed bool
	}{
		{"ours", labels.Set{managedByLabel: managedByValue, barLabel: "web"}, true},
		{"no labels", nil, false},
		{"managed by someone else", labels.Set{managedByLabel: "helm"}, false},
		{"an empty managed-by", labels.Set{managedByLabel: ""}, false},
		{"our Bar label without managed-by", labels.Set{barLabel: "web"}, false},
	} {
		if m, o := managed.Matches(tc.labels), others.Matches(tc.labels); m != tc.managed || o == m {
			t.Errorf("%s: managed selector %v, others %v; want exactly one, managed %v", tc.name, m, o, tc.managed)
		}
	}
}
