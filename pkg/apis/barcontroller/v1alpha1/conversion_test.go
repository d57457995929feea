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
	"strings"
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

// alphaBar is hubBar in v1alpha1, with annotation (nil: absent) under
// ResourcesAnnotation.
func alphaBar(annotation *string) *barv1alpha1.Bar {
	b := &barv1alpha1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: "example", Annotations: map[string]string{"team": "web"}},
		Spec:       barv1alpha1.BarSpec{DeploymentName: "example-nginx", Replicas: ptr.To[int32](2), Image: "nginx:1.28.0"},
	}
	if annotation != nil {
		b.Annotations[barv1alpha1.ResourcesAnnotation] = *annotation
	}
	return b
}

// hubWith is hubBar with these resources and annotation (nil: absent)
// under ResourcesAnnotation.
func hubWith(resources corev1.ResourceRequirements, annotation *string) *barcontroller.Bar {
	b := hubBar()
	b.Spec.Template.Resources = resources
	if annotation != nil {
		b.Annotations[barv1alpha1.ResourcesAnnotation] = *annotation
	}
	return b
}

// What a v1alpha1 client reads.
func TestToV1alpha1(t *testing.T) {
	resources := hubBar().Spec.Template.Resources
	for _, tc := range []struct {
		name     string
		in       *barcontroller.Bar
		wantAnno *string // under ResourcesAnnotation; nil: absent
	}{{
		name:     "resources: in JSON",
		in:       hubWith(resources, nil),
		wantAnno: ptr.To(resourcesJSON),
	}, {
		name: "no resources: no annotation",
		in:   hubWith(corev1.ResourceRequirements{}, nil),
	}, {
		// From here on the v1 Bar carries the key itself, as one written
		// before the admission policy may.
		name:     "a value that is not resources, no resources: the value, which comes back as it is",
		in:       hubWith(corev1.ResourceRequirements{}, ptr.To("not json")),
		wantAnno: ptr.To("not json"),
	}, {
		name:     "resources that say nothing, no resources: the value",
		in:       hubWith(corev1.ResourceRequirements{}, ptr.To("{}")),
		wantAnno: ptr.To("{}"),
	}, {
		// The stale value of issue 31: written back as read, it would
		// become the Bar's resources.
		name:     "resources in the value, none in the spec: carried, so it cannot become resources",
		in:       hubWith(corev1.ResourceRequirements{}, ptr.To(`{"limits":{"cpu":"2"}}`)),
		wantAnno: ptr.To(`{"annotation":"{\"limits\":{\"cpu\":\"2\"}}"}`),
	}, {
		name:     "a value and resources: both carried, neither overwrites the other",
		in:       hubWith(resources, ptr.To("not json")),
		wantAnno: ptr.To(`{"annotation":"not json","resources":` + resourcesJSON + `}`),
	}, {
		name:     "the carried form as the value: carried again",
		in:       hubWith(corev1.ResourceRequirements{}, ptr.To(`{"annotation":"x"}`)),
		wantAnno: ptr.To(`{"annotation":"{\"annotation\":\"x\"}"}`),
	}, {
		// Issue 39, ninth review, C3: escaped, each '<' was six bytes in
		// the annotation and seven in a conversion's answer.
		name:     "<, > and & as they are: the annotation is no larger than the resources",
		in:       hubWith(corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/<a&b>": resource.MustParse("1")}}, nil),
		wantAnno: ptr.To(`{"limits":{"example.com/<a&b>":"1"}}`),
	}, {
		name:     "a value with <, > and & in the carried form: as they are",
		in:       hubWith(resources, ptr.To("<a&b>")),
		wantAnno: ptr.To(`{"annotation":"<a&b>","resources":` + resourcesJSON + `}`),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.DeepCopy()
			var got barv1alpha1.Bar
			if err := scheme(t).Convert(tc.in, &got, nil); err != nil {
				t.Fatal(err)
			}
			if want := alphaBar(tc.wantAnno); !apiequality.Semantic.DeepEqual(want, &got) {
				t.Errorf("(-want +got):\n%s", cmp.Diff(want, &got))
			}
			if !apiequality.Semantic.DeepEqual(before, tc.in) {
				t.Errorf("converting changed the hub Bar:\n%s", cmp.Diff(before, tc.in))
			}
		})
	}
}

// What a v1alpha1 client's write means for the resources. The admission
// policy (artifacts/admission) refuses some of these writes; the
// conversion takes them all without an error, since it also reads Bars
// stored before the policy.
func TestFromV1alpha1(t *testing.T) {
	resources := hubBar().Spec.Template.Resources
	none := corev1.ResourceRequirements{}
	claims := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
	for _, tc := range []struct {
		name       string
		annotation *string // nil: absent
		want       *barcontroller.Bar
	}{{
		name:       "written back as read: the resources stay",
		annotation: ptr.To(resourcesJSON),
		want:       hubWith(resources, nil),
	}, {
		name:       "quantities as a person writes them: the same resources",
		annotation: ptr.To(`{"requests":{"cpu":"0.1","memory":"64Mi"},"limits":{"memory":"128Mi"}}`),
		want:       hubWith(resources, nil),
	}, {
		name: "annotation removed: no resources",
		want: hubWith(none, nil),
	}, {
		name:       "not resources: kept as an annotation, no resources, no error",
		annotation: ptr.To(`{"cpu":"1"}`),
		want:       hubWith(none, ptr.To(`{"cpu":"1"}`)),
	}, {
		name:       "resources that say nothing: kept as an annotation",
		annotation: ptr.To(`{}`),
		want:       hubWith(none, ptr.To(`{}`)),
	}, {
		name:       "keys in another case: not resources (decoding is case-sensitive)",
		annotation: ptr.To(`{"Limits":{"cpu":"1"}}`),
		want:       hubWith(none, ptr.To(`{"Limits":{"cpu":"1"}}`)),
	}, {
		name:       "claims: resources with claims, which v1 would refuse (the policy does)",
		annotation: ptr.To(`{"claims":[{"name":"gpu"}]}`),
		want:       hubWith(claims, nil),
	}, {
		name:       "the carried form: the value and the resources apart",
		annotation: ptr.To(`{"annotation":"not json","resources":` + resourcesJSON + `}`),
		want:       hubWith(resources, ptr.To("not json")),
	}, {
		name:       "the carried form without resources: the value alone",
		annotation: ptr.To(`{"annotation":"{\"limits\":{\"cpu\":\"2\"}}"}`),
		want:       hubWith(none, ptr.To(`{"limits":{"cpu":"2"}}`)),
	}, {
		name:       "the carried form without a value: not that form, kept as an annotation",
		annotation: ptr.To(`{"annotation":null,"resources":` + resourcesJSON + `}`),
		want:       hubWith(none, ptr.To(`{"annotation":null,"resources":`+resourcesJSON+`}`)),
	}, {
		name:       "escaped as an earlier release wrote it: the same resources",
		annotation: ptr.To(`{"limits":{"example.com/\u003ca\u0026b\u003e":"1"}}`),
		want:       hubWith(corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/<a&b>": resource.MustParse("1")}}, nil),
	}, {
		// Ninth review, m1: String() of a quantity takes time that grows
		// with the square of its digits (barcontroller.MaxQuantityBytes);
		// v1's CRD refuses it.
		name:       "a quantity longer than the CRD allows: not resources, kept as an annotation",
		annotation: ptr.To(longQuantity),
		want:       hubWith(none, ptr.To(longQuantity)),
	}, {
		name:       "the same in the carried form: kept as an annotation",
		annotation: ptr.To(`{"annotation":"x","resources":` + longQuantity + `}`),
		want:       hubWith(none, ptr.To(`{"annotation":"x","resources":`+longQuantity+`}`)),
	}, {
		// Tenth review, C1: 28 bytes that parse to about 10^30000000.
		name:       "an exponent of more than two digits: kept as an annotation",
		annotation: ptr.To(`{"limits":{"cpu":"1111111111111111111e30000000"}}`),
		want:       hubWith(none, ptr.To(`{"limits":{"cpu":"1111111111111111111e30000000"}}`)),
	}, {
		// Tenth review, M1: the check's decoding failed (or dropped the
		// map, matching keys in any case) where the strict decoding after
		// it parsed the quantity before it failed.
		name:       "a long quantity beside a field of the wrong type: kept, never parsed",
		annotation: ptr.To(strings.TrimSuffix(longQuantity, "}") + `,"requests":5}`),
		want:       hubWith(none, ptr.To(strings.TrimSuffix(longQuantity, "}")+`,"requests":5}`)),
	}, {
		// Twelfth review, C1: a map keeps the last of a repeated key;
		// the strict decoding parsed both.
		name:       "an unbounded quantity, then the same key bounded: kept, never parsed",
		annotation: ptr.To(`{"limits":{"cpu":"1111111111111111111e30000000","cpu":"1"}}`),
		want:       hubWith(none, ptr.To(`{"limits":{"cpu":"1111111111111111111e30000000","cpu":"1"}}`)),
	}, {
		name:       "the same in the carried form, and limits twice: kept",
		annotation: ptr.To(`{"annotation":"a","resources":{"limits":{"cpu":"1e-99999999"},"limits":null}}`),
		want:       hubWith(none, ptr.To(`{"annotation":"a","resources":{"limits":{"cpu":"1e-99999999"},"limits":null}}`)),
	}, {
		name:       "a long quantity beside a key in another case: kept",
		annotation: ptr.To(strings.TrimSuffix(longQuantity, "}") + `,"LIMITS":null}`),
		want:       hubWith(none, ptr.To(strings.TrimSuffix(longQuantity, "}")+`,"LIMITS":null}`)),
	}, {
		name:       "a quantity as long as the CRD allows: resources",
		annotation: ptr.To(`{"limits":{"cpu":"` + strings.Repeat("1", barcontroller.MaxQuantityBytes) + `"}}`),
		want: hubWith(corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(strings.Repeat("1", barcontroller.MaxQuantityBytes))}}, nil),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := alphaBar(tc.annotation)
			before := in.DeepCopy()
			var got barcontroller.Bar
			if err := scheme(t).Convert(in, &got, nil); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, &got) {
				t.Errorf("(-want +got):\n%s", cmp.Diff(tc.want, &got))
			}
			if !apiequality.Semantic.DeepEqual(before, in) {
				t.Errorf("converting changed the v1alpha1 Bar:\n%s", cmp.Diff(before, in))
			}
		})
	}
}

// longQuantity is resources with a quantity a byte longer than the CRD
// allows.
var longQuantity = `{"limits":{"cpu":"` + strings.Repeat("1", barcontroller.MaxQuantityBytes+1) + `"}}`

// TestReadModifyWriteKeepsSpec is issue 31's lossy round trip: a v1 Bar
// that carries the key, read in v1alpha1 and written back unchanged, must
// come back with the spec and annotations it had. Before, a value that
// was resources in JSON became the Bar's resources (and rolled its Pods),
// and resources overwrote a value.
func TestReadModifyWriteKeepsSpec(t *testing.T) {
	resources := hubBar().Spec.Template.Resources
	for _, v1 := range []*barcontroller.Bar{
		hubWith(corev1.ResourceRequirements{}, ptr.To(`{"limits":{"cpu":"2"}}`)),
		hubWith(resources, ptr.To(`{"limits":{"cpu":"2"}}`)),
		hubWith(resources, ptr.To("anything")),
		hubWith(corev1.ResourceRequirements{}, ptr.To(`{"annotation":"{}"}`)),
	} {
		var alpha barv1alpha1.Bar
		if err := scheme(t).Convert(v1, &alpha, nil); err != nil {
			t.Fatal(err)
		}
		var back barcontroller.Bar
		if err := scheme(t).Convert(&alpha, &back, nil); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(v1, &back) {
			t.Errorf("through v1alpha1 (annotation %q) (-before +after):\n%s",
				alpha.Annotations[barv1alpha1.ResourcesAnnotation], cmp.Diff(v1, &back))
		}
	}
}
