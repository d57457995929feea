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
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/conversion"
	sigsjson "sigs.k8s.io/json"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
)

// ResourcesAnnotation holds, on a Bar read through v1alpha1, the container
// resources of v1's spec.template.resources as JSON (a
// core/v1 ResourceRequirements), because v1alpha1 has no field for them. It
// is how Kubernetes keeps a newer field through an older version (compare
// autoscaling/v1's HorizontalPodAutoscaler annotations), and it makes a
// round trip lossless: v1 -> v1alpha1 -> v1 keeps the resources.
//
// What a v1alpha1 client does with it:
//   - Read, change something else, write back (update, or a patch or apply
//     that does not mention the annotation): the annotation goes back as it
//     was, and the resources stay.
//   - Change its JSON: that is how a v1alpha1 client sets v1's resources.
//   - Remove it: the resources are cleared, as removing the field in v1
//     would.
//   - Set it to something that is not a ResourceRequirements in JSON
//     (unknown fields included), or to one without requests, limits or
//     claims: it stays an ordinary annotation, visible in every version, and
//     the Bar has no resources. Conversion never fails over it, because a
//     failing conversion would also fail every list and watch that includes
//     the Bar.
//
// Valid JSON comes back in Go's encoding of the struct (quantities in
// canonical form, e.g. "0.1" as "100m"): the same resources, maybe other bytes.
//
// The internal version (and v1, which has its shape) never carries a valid
// value under this key: converting from v1alpha1 moves it into
// spec.template.resources, and converting to v1alpha1 writes it afresh.
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
	var resources corev1.ResourceRequirements
	strict, err := sigsjson.UnmarshalStrict([]byte(encoded), &resources)
	if err != nil || len(strict) > 0 || isEmpty(&resources) {
		// Not resources (or none): keep it as an ordinary annotation, so
		// that converting back gives the same object.
		return nil
	}
	out.Spec.Template.Resources = resources
	// The generated code shares the annotations map with in; never change
	// the object being converted from.
	out.Annotations = withoutKey(out.Annotations, ResourcesAnnotation)
	return nil
}

// Convert_barcontroller_Bar_To_v1alpha1_Bar converts the Bar and records
// spec.template.resources, if any, in ResourcesAnnotation.
func Convert_barcontroller_Bar_To_v1alpha1_Bar(in *barcontroller.Bar, out *Bar, s conversion.Scope) error {
	if err := autoConvert_barcontroller_Bar_To_v1alpha1_Bar(in, out, s); err != nil {
		return err
	}
	if isEmpty(&in.Spec.Template.Resources) {
		return nil
	}
	encoded, err := json.Marshal(&in.Spec.Template.Resources)
	if err != nil {
		return err
	}
	annotations := make(map[string]string, len(out.Annotations)+1)
	for k, v := range out.Annotations {
		annotations[k] = v
	}
	annotations[ResourcesAnnotation] = string(encoded)
	out.Annotations = annotations
	return nil
}

// isEmpty says whether resources say nothing, so that a Bar without them
// gets no annotation (nil and empty maps alike: both mean "no resources").
func isEmpty(r *corev1.ResourceRequirements) bool {
	return len(r.Limits) == 0 && len(r.Requests) == 0 && len(r.Claims) == 0
}

// withoutKey returns a copy of m without key, or nil when nothing is left.
func withoutKey(m map[string]string, key string) map[string]string {
	if len(m) <= 1 {
		return nil
	}
	out := make(map[string]string, len(m)-1)
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}
