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

package v1alpha1

import (
	"bytes"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/conversion"
	sigsjson "sigs.k8s.io/json"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
)

// ResourcesAnnotation holds, on a Bar read through v1alpha1, the container
// resources of v1's spec.template.resources as JSON (a core/v1
// ResourceRequirements), because v1alpha1 has no field for them. It is how
// Kubernetes keeps a newer field through an older version (compare
// autoscaling/v1's HorizontalPodAutoscaler annotations), and it makes a
// round trip lossless: v1 -> v1alpha1 -> v1 keeps the resources.
//
// What a v1alpha1 client does with it:
//   - Read, change something else, write back (update, or a patch or apply
//     that does not mention the annotation): the annotation goes back as it
//     was, and the resources stay.
//   - Create a Bar with it: the Bar has those resources.
//   - Change or remove it on an existing Bar: the resources change, but the
//     API server bumps metadata.generation only for a change it sees in
//     v1alpha1's spec, so the admission policy shipped with the CRD
//     (artifacts/admission) refuses a resources change that comes
//     without one; make it in v1. Without the policy it goes through
//     unnoticed by status.observedGeneration.
//
// Whatever is not a ResourceRequirements in JSON with requests, limits or
// claims (unknown fields included) stays an ordinary annotation here, so
// that conversion never fails over it: a failing conversion would also fail
// every list and watch that includes the Bar. The policy refuses such a
// write, and claims, as v1 would; conversion accepts what the policy
// refuses, since it also reads Bars stored before the policy existed.
//
// Valid JSON comes back as AnnotationJSON writes the struct (quantities in
// canonical form, e.g. "0.1" as "100m"): the same resources, maybe other bytes.
//
// A v1 Bar never carries this key (the policy refuses it), but one written
// before the policy may. Converting to v1alpha1 then writes its value alone
// if the Bar has no resources and the value would come back unchanged by
// itself (it is not resources), and otherwise the value and the resources
// together, as {"annotation":<its value>,"resources":<them>} (see carried).
// Converting from v1alpha1 takes both out again: the round trip is lossless
// for every v1 Bar, and a stale value under the key never becomes resources.
const ResourcesAnnotation = "barcontroller.dev/v1-template-resources"

// The two spec conversions below are the fields whose path changed between
// v1alpha1 and the internal version; conversion-gen converts the rest
// (replicas, status, metadata) and calls these for BarSpec, because it finds
// them here under the names it would have generated.

// Convert_v1alpha1_BarSpec_To_barcontroller_BarSpec moves spec.deploymentName
// to spec.deployment.name and spec.image to spec.template.image.
func Convert_v1alpha1_BarSpec_To_barcontroller_BarSpec(in *BarSpec, out *barcontroller.BarSpec, s conversion.Scope) error {
	if err := autoConvert_v1alpha1_BarSpec_To_barcontroller_BarSpec(in, out, s); err != nil {
		return err
	}
	out.Deployment.Name = in.DeploymentName
	out.Template.Image = in.Image
	return nil
}

// Convert_barcontroller_BarSpec_To_v1alpha1_BarSpec is the reverse of
// Convert_v1alpha1_BarSpec_To_barcontroller_BarSpec. spec.template.resources
// has no place in a v1alpha1 spec; Convert_barcontroller_Bar_To_v1alpha1_Bar
// puts it in ResourcesAnnotation, since annotations are outside the spec.
func Convert_barcontroller_BarSpec_To_v1alpha1_BarSpec(in *barcontroller.BarSpec, out *BarSpec, s conversion.Scope) error {
	if err := autoConvert_barcontroller_BarSpec_To_v1alpha1_BarSpec(in, out, s); err != nil {
		return err
	}
	out.DeploymentName = in.Deployment.Name
	out.Image = in.Template.Image
	return nil
}

// carried is the form ResourcesAnnotation takes when a v1 Bar carries the
// key itself: its own value and its resources. Annotation is never nil in
// this form, which tells it apart from a ResourceRequirements (whose JSON
// has no such field, and which would fail strict decoding into this type).
type carried struct {
	Annotation *string                      `json:"annotation"`
	Resources  *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// fromAnnotation reads a value of ResourcesAnnotation as conversion from
// v1alpha1 takes it: the resources it gives the Bar, and what stays under
// the key (nil for nothing).
func fromAnnotation(encoded string) (corev1.ResourceRequirements, *string) {
	if hasUnboundedQuantity(encoded) {
		// The CRD refuses such quantities in v1, and parsing and writing
		// them again takes time and memory that grow with what they say
		// (barcontroller.BoundedQuantity): not resources.
		return corev1.ResourceRequirements{}, &encoded
	}
	var c carried
	if strict, err := sigsjson.UnmarshalStrict([]byte(encoded), &c); err == nil && len(strict) == 0 && c.Annotation != nil {
		var resources corev1.ResourceRequirements
		if c.Resources != nil {
			resources = *c.Resources
		}
		return resources, c.Annotation
	}
	var resources corev1.ResourceRequirements
	strict, err := sigsjson.UnmarshalStrict([]byte(encoded), &resources)
	if err != nil || len(strict) > 0 || isEmpty(&resources) {
		// Not resources (or none): an ordinary annotation.
		return corev1.ResourceRequirements{}, &encoded
	}
	return resources, nil
}

// toAnnotation is the value of ResourcesAnnotation that fromAnnotation
// reads back as exactly these resources and this value under the key, or
// nil when there is nothing to write.
func toAnnotation(resources *corev1.ResourceRequirements, value *string) (*string, error) {
	if value == nil {
		if isEmpty(resources) {
			return nil, nil
		}
		encoded, err := AnnotationJSON(resources)
		if err != nil {
			return nil, err
		}
		return &encoded, nil
	}
	if isEmpty(resources) {
		// A value that is neither resources nor the carried form comes
		// back unchanged by itself, as it always has.
		if back, kept := fromAnnotation(*value); isEmpty(&back) && kept != nil && *kept == *value {
			return value, nil
		}
	}
	c := carried{Annotation: value}
	if !isEmpty(resources) {
		c.Resources = resources
	}
	encoded, err := AnnotationJSON(&c)
	if err != nil {
		return nil, err
	}
	return &encoded, nil
}

// AnnotationJSON is v in JSON as conversion writes it under
// ResourcesAnnotation: encoding/json's encoding without its escaping of
// <, > and &. The value is a string in a string when it travels (in the
// Bar, in a ConversionReview), and each escaping multiplies: a resource
// name of n '<' made an annotation of 6n bytes and a conversion answer of
// 7n (issue 39, ninth review, C3). A JSON reader needs none of it; an
// annotation written with it by an earlier release reads as the same
// resources, and comes back in these bytes.
func AnnotationJSON(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// hasUnboundedQuantity says whether encoded, in either form fromAnnotation
// reads, has a quantity that barcontroller.BoundedQuantity refuses, or is
// not resources in either form at all: each quantity stays raw bytes
// here, and nothing is parsed. It reads case-sensitively, as the strict
// decoding after it does, and refuses a key twice in one object: that
// decoding parses every value of a repeated key before it reports it, and
// a map keeps only the last, so "cpu" twice, unbounded and then "1", got
// the unbounded one parsed (issue 39, twelfth review, C1). Where this
// fails, so would that decoding: not resources.
func hasUnboundedQuantity(encoded string) bool {
	type quantities struct {
		Limits   map[string]json.RawMessage `json:"limits"`
		Requests map[string]json.RawMessage `json:"requests"`
	}
	var raw struct {
		quantities
		Resources *quantities `json:"resources"`
	}
	if strict, err := sigsjson.UnmarshalStrict([]byte(encoded), &raw, sigsjson.DisallowDuplicateFields); err != nil || len(strict) > 0 {
		return true
	}
	unbounded := func(q *quantities) bool {
		for _, m := range []map[string]json.RawMessage{q.Limits, q.Requests} {
			for _, v := range m {
				s := string(v)
				if len(s) >= 2 && s[0] == '"' {
					s = s[1 : len(s)-1] // a string's bytes, escapes and all
				}
				if !barcontroller.BoundedQuantity(s) {
					return true
				}
			}
		}
		return false
	}
	return unbounded(&raw.quantities) || raw.Resources != nil && unbounded(raw.Resources)
}

// Convert_v1alpha1_Bar_To_barcontroller_Bar converts the Bar and takes the
// resources out of ResourcesAnnotation (see its doc for the cases).
func Convert_v1alpha1_Bar_To_barcontroller_Bar(in *Bar, out *barcontroller.Bar, s conversion.Scope) error {
	if err := autoConvert_v1alpha1_Bar_To_barcontroller_Bar(in, out, s); err != nil {
		return err
	}
	encoded, ok := out.Annotations[ResourcesAnnotation]
	if !ok {
		return nil
	}
	resources, value := fromAnnotation(encoded)
	out.Spec.Template.Resources = resources
	// The generated code shares the annotations map with in; never change
	// the object being converted from.
	out.Annotations = withKey(out.Annotations, ResourcesAnnotation, value)
	return nil
}

// Convert_barcontroller_Bar_To_v1alpha1_Bar converts the Bar and records
// spec.template.resources, if any, and the Bar's own value of the key, if
// it has one, in ResourcesAnnotation (toAnnotation).
func Convert_barcontroller_Bar_To_v1alpha1_Bar(in *barcontroller.Bar, out *Bar, s conversion.Scope) error {
	if err := autoConvert_barcontroller_Bar_To_v1alpha1_Bar(in, out, s); err != nil {
		return err
	}
	var value *string
	if v, ok := in.Annotations[ResourcesAnnotation]; ok {
		value = &v
	}
	encoded, err := toAnnotation(&in.Spec.Template.Resources, value)
	if err != nil {
		return err
	}
	if encoded == nil || value != nil && *encoded == *value {
		// Nothing to write, or already there: out shares in's map, as is.
		return nil
	}
	out.Annotations = withKey(out.Annotations, ResourcesAnnotation, encoded)
	return nil
}

// isEmpty says whether resources say nothing, so that a Bar without them
// gets no annotation (nil and empty maps alike: both mean "no resources").
func isEmpty(r *corev1.ResourceRequirements) bool {
	return len(r.Limits) == 0 && len(r.Requests) == 0 && len(r.Claims) == 0
}

// withKey returns a copy of m with key set to *value, or without key when
// value is nil; nil when nothing is left. m itself is never changed: it may
// be shared with the object being converted from.
func withKey(m map[string]string, key string, value *string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	if value != nil {
		out[key] = *value
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
