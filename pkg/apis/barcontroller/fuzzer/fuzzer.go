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

// Package fuzzer holds the randfill functions that fill Bars with random but
// well-formed values for the round-trip tests in
// pkg/apis/barcontroller/install. They constrain only what the API itself
// constrains: everything else is left to randfill, so that a field a
// conversion forgets shows up as a difference.
package fuzzer

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// Funcs returns the fuzzer functions for the Bar API, in the form
// k8s.io/apimachinery/pkg/api/apitesting/fuzzer expects; merge them with
// k8s.io/apimachinery/pkg/apis/meta/fuzzer's Funcs for the object metadata.
func Funcs(_ runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		// A Quantity's fields are private and cache its string form; filling
		// them at random makes values no parser could produce. Draw
		// the three forms users write: plain (3), milli (100m), binary (64Mi).
		func(q *resource.Quantity, c randfill.Continue) {
			switch c.Intn(3) {
			case 0:
				*q = *resource.NewQuantity(c.Int63n(1000), resource.DecimalSI)
			case 1:
				*q = *resource.NewMilliQuantity(c.Int63n(100000), resource.DecimalSI)
			default:
				*q = *resource.NewQuantity(c.Int63n(1<<20)<<10, resource.BinarySI)
			}
		},
		// Every version may carry ResourcesAnnotation in every form. v1
		// (and the hub, which has its shape) refuses the key at admission,
		// but a Bar written before that policy, or where it is not
		// installed, may still carry it, and a round trip through v1alpha1
		// must keep it and its resources apart.
		func(b *barcontroller.Bar, c randfill.Continue) {
			c.FillNoCustom(b)
			b.Annotations = withResourcesAnnotation(b.Annotations, c)
		},
		func(b *barv1.Bar, c randfill.Continue) {
			c.FillNoCustom(b)
			b.Annotations = withResourcesAnnotation(b.Annotations, c)
		},
		func(b *barv1alpha1.Bar, c randfill.Continue) {
			c.FillNoCustom(b)
			b.Annotations = withResourcesAnnotation(b.Annotations, c)
		},
	}
}

// withResourcesAnnotation returns annotations with ResourcesAnnotation in
// one of the forms a client can write, each as conversion would write it
// (a round trip gives conversion's bytes back, not the client's): absent;
// resources in JSON; resources in JSON that say nothing; not resources at
// all; or the form conversion gives a v1 Bar's own value of the key with
// its resources. Under the hub and v1, every value is an ordinary
// annotation; under v1alpha1 each form means what the annotation's doc
// says.
func withResourcesAnnotation(annotations map[string]string, c randfill.Continue) map[string]string {
	var value string
	switch c.Intn(5) {
	case 0:
		delete(annotations, barv1alpha1.ResourcesAnnotation)
		return annotations
	case 1:
		var r corev1.ResourceRequirements
		c.Fill(&r)
		value = mustJSON(&r)
	case 2:
		value = "{}"
	case 3:
		value = c.String(0)
	default:
		// Resources that say something, so that conversion writes this
		// form rather than the value alone.
		var r corev1.ResourceRequirements
		c.Fill(&r)
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(c.Int63n(100000)+1, resource.DecimalSI)
		value = mustJSON(&struct {
			Annotation string                       `json:"annotation"`
			Resources  *corev1.ResourceRequirements `json:"resources"`
		}{c.String(0), &r})
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[barv1alpha1.ResourcesAnnotation] = value
	return annotations
}

// mustJSON is v as conversion writes it under the key.
func mustJSON(v any) string {
	encoded, err := barv1alpha1.AnnotationJSON(v)
	if err != nil {
		panic(err)
	}
	return encoded
}
