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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
)

// SchemeGroupVersion is the group and version the generated clients use.
var SchemeGroupVersion = schema.GroupVersion{Group: barcontroller.GroupName, Version: "v1alpha1"}

// Kind takes an unqualified kind and returns a group-qualified GroupKind.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource takes an unqualified resource and returns a group-qualified GroupResource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that add this version's types to a
	// scheme; the generated clientset calls AddToScheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// localSchemeBuilder is what the generated zz_generated.conversion.go
	// registers its conversion functions with (in an init func), so that
	// AddToScheme adds the conversions to and from the internal version too.
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds Bar and BarList, and their conversions to and from
	// the internal version, to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &Bar{}, &BarList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
