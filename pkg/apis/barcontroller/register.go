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

package barcontroller

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of Bar. It is deliberately outside k8s.io and
// kubernetes.io, which are reserved for APIs that went through Kubernetes API
// review.
const GroupName = "barcontroller.dev"

// SchemeGroupVersion is the internal version of the group. Its version is
// runtime.APIVersionInternal ("__internal"): a scheme treats the types
// registered under it as the hub that conversions go through.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Kind takes an unqualified kind and returns a group-qualified GroupKind.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource takes an unqualified resource and returns a group-qualified GroupResource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that add the internal types to a
	// scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal Bar and BarList to a scheme. Use
	// pkg/apis/barcontroller/install to get every version with its
	// conversions at once.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the hub types. Unlike a served version it does not
// call metav1.AddToGroupVersion: the internal version has no ListOptions,
// WatchEvent and friends of its own, as no client ever speaks it.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &Bar{}, &BarList{})
	return nil
}
