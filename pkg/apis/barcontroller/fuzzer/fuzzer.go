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
	"encoding/json"

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
		// The internal version and v1 never carry ResourcesAnnotation: it is
		// v1alpha1's spelling of spec.template.resources and reserved.
		func(b *barcontroller.Bar, c randfill.Continue) {
			c.FillNoCustom(b)
			delete(b.Annotations, barv1alpha1.ResourcesAnnotation)
		},
		func(b *barv1.Bar, c randfill.Continue) {
			c.FillNoCustom(b)
			delete(b.Annotations, barv1alpha1.ResourcesAnnotation)
		},
		// A v1alpha1 Bar may carry the annotation in every form a client can
		// write: absent, as conversion writes it, with nothing in it, or
		// not resources at all.
		func(b *barv1alpha1.Bar, c randfill.Continue) {
			c.FillNoCustom(b)
			var value string
			switch c.Intn(4) {
			case 0:
				delete(b.Annotations, barv1alpha1.ResourcesAnnotation)
				return
			case 1:
				var r corev1.ResourceRequirements
				c.Fill(&r)
				encoded, err := json.Marshal(&r)
				if err != nil {
					panic(err)
				}
				value = string(encoded)
			case 2:
				value = "{}"
			default:
				value = c.String(0)
			}
			if b.Annotations == nil {
				b.Annotations = map[string]string{}
			}
			b.Annotations[barv1alpha1.ResourcesAnnotation] = value
		},
	}
}
