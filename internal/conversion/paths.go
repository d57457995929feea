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

package conversion

import (
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// The paths in a Bar that weighing it (shape.go) looks for: each is a
// key path from the object's root, "*" for an array's element.

// servedVersions are the versions of the API the webhook converts from.
var servedVersions = map[string]bool{barv1.SchemeGroupVersion.Version: true, v1alpha1.SchemeGroupVersion.Version: true}

// nested is whether the strings at path travel as a string in a string
// when converted, each " and \ escaped once more: the resources, which
// v1alpha1 carries as JSON in ResourcesAnnotation, and the annotation
// itself, which v1alpha1 carries inside its own form when a v1 Bar has
// it (v1alpha1.AnnotationJSON). They are weighed twice.
func nested(path []string) bool {
	return isResourcesAnnotation(path) ||
		len(path) >= 3 && path[0] == "spec" && path[1] == "template" && path[2] == "resources"
}

// maxPathKey is the longest of pathKeys.
const maxPathKey = len(v1alpha1.ResourcesAnnotation)

// pathKeys are the keys the paths below look for.
var pathKeys = [...]string{"metadata", "managedFields", "fieldsV1", "annotations", "spec", "template", "resources", "limits", "requests", v1alpha1.ResourcesAnnotation,
	"creationTimestamp", "deletionTimestamp", "time", "status", "conditions", "lastTransitionTime"}

// isTime is whether the value at path is a metav1.Time of a Bar.
func isTime(path []string) bool {
	switch len(path) {
	case 2:
		return path[0] == "metadata" && (path[1] == "creationTimestamp" || path[1] == "deletionTimestamp")
	case 4:
		return path[0] == "metadata" && path[1] == "managedFields" && path[3] == "time" ||
			path[0] == "status" && path[1] == "conditions" && path[3] == "lastTransitionTime"
	}
	return false
}

// opaque is whether the value at path is one the Go types keep as raw
// JSON: a managedFields entry's fieldsV1 (metav1.FieldsV1).
func opaque(path []string) bool {
	return len(path) == 4 && path[0] == "metadata" && path[1] == "managedFields" && path[3] == "fieldsV1"
}

// annotationRoot is the root of the JSON in v1alpha1's
// ResourcesAnnotation.
const annotationRoot = "(" + v1alpha1.ResourcesAnnotation + ")"

func isResourcesAnnotation(path []string) bool {
	return len(path) == 3 && path[0] == "metadata" && path[1] == "annotations" && path[2] == v1alpha1.ResourcesAnnotation
}

// isQuantity is whether the value at path is a resource.Quantity: one of
// v1's spec.template.resources.limits or .requests, or of the resources in
// v1alpha1's ResourcesAnnotation (either of its forms).
func isQuantity(path []string) bool {
	switch {
	case len(path) == 5 && path[0] == "spec" && path[1] == "template" && path[2] == "resources":
		path = path[3:]
	case len(path) == 3 && path[0] == annotationRoot:
		path = path[1:]
	case len(path) == 4 && path[0] == annotationRoot && path[1] == "resources":
		path = path[2:]
	default:
		return false
	}
	return path[0] == "limits" || path[0] == "requests"
}
