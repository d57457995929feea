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

package v1alpha1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller/install"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// The round-trip fuzz tests (pkg/apis/barcontroller/install) prove nothing
// is lost; these show, on one example each, what a v1alpha1 client sees and
// what its writes mean.

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	install.Install(s)
	return s
}

func hubBar() *barcontroller.Bar {
	return &barcontroller.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: "example", Annotations: map[string]string{"team": "web"}},
		Spec: barcontroller.BarSpec{
			Replicas:   ptr.To[int32](2),
			Deployment: barcontroller.BarDeployment{Name: "example-nginx"},
			Template: barcontroller.BarPodTemplate{
				Image: "nginx:1.28.0",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
				},
			},
		},
	}
}

const resourcesJSON = `{"limits":{"memory":"128Mi"},"requests":{"cpu":"100m","memory":"64Mi"}}`

func TestToV1alpha1(t *testing.T) {
	var got barv1alpha1.Bar
	if err := scheme(t).Convert(hubBar(), &got, nil); err != nil {
		t.Fatal(err)
	}
	want := barv1alpha1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: "example", Annotations: map[string]string{
			"team":                          "web",
			barv1alpha1.ResourcesAnnotation: resourcesJSON,
		}},
		Spec: barv1alpha1.BarSpec{DeploymentName: "example-nginx", Replicas: ptr.To[int32](2), Image: "nginx:1.28.0"},
	}
	if !apiequality.Semantic.DeepEqual(&want, &got) {
		t.Errorf("(-want +got):\n%s", cmp.Diff(&want, &got))
	}
}

// What a v1alpha1 client's write means for the resources.
func TestFromV1alpha1(t *testing.T) {
	noResources := hubBar()
	noResources.Spec.Template.Resources = corev1.ResourceRequirements{}
	for _, tc := range []struct {
		name       string
		annotation *string // nil: absent
		want       func() *barcontroller.Bar
	}{{
		name:       "written back as read: the resources stay",
		annotation: ptr.To(resourcesJSON),
		want:       hubBar,
	}, {
		name:       "annotation removed: no resources",
		annotation: nil,
		want:       func() *barcontroller.Bar { return noResources.DeepCopy() },
	}, {
		name:       "not resources: kept as an annotation, no resources, no error",
		annotation: ptr.To(`{"cpu":"1"}`),
		want: func() *barcontroller.Bar {
			b := noResources.DeepCopy()
			b.Annotations[barv1alpha1.ResourcesAnnotation] = `{"cpu":"1"}`
			return b
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := &barv1alpha1.Bar{
				ObjectMeta: metav1.ObjectMeta{Name: "example", Annotations: map[string]string{"team": "web"}},
				Spec:       barv1alpha1.BarSpec{DeploymentName: "example-nginx", Replicas: ptr.To[int32](2), Image: "nginx:1.28.0"},
			}
			if tc.annotation != nil {
				in.Annotations[barv1alpha1.ResourcesAnnotation] = *tc.annotation
			}
			var got barcontroller.Bar
			if err := scheme(t).Convert(in, &got, nil); err != nil {
				t.Fatal(err)
			}
			if want := tc.want(); !apiequality.Semantic.DeepEqual(want, &got) {
				t.Errorf("(-want +got):\n%s", cmp.Diff(want, &got))
			}
		})
	}
}
