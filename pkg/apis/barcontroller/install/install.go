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

// Package install registers every version of the Bar API, and the
// conversions between them, in a scheme.
//
// The scheme it builds is what converts a Bar between versions: decode a Bar
// of one version, scheme.Convert it to the internal version
// (pkg/apis/barcontroller), scheme.Convert that to the version wanted. Both
// steps are the functions conversion-gen generated plus the hand-written
// ones in each version's conversion.go. There is no direct v1alpha1 <-> v1
// conversion: every version converts only to and from the hub, so adding a
// version means writing its conversion to the hub and no other.
//
// A converted object shares memory with the one it came from: conversion-gen
// converts v1 and the hub, whose Go types are laid out alike, by casting
// pointers, and copies maps and slices by reference elsewhere. Convert a deep
// copy when the original is shared (an informer's cache, say) and the result
// will be modified. The hand-written conversions never modify their input.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// Install adds the internal version, v1alpha1 and v1 of the Bar API, with
// their conversions, to scheme, and makes v1 the version the scheme prefers
// (for example when it encodes an internal object without being told a
// version).
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(barcontroller.AddToScheme(scheme))
	utilruntime.Must(barv1alpha1.AddToScheme(scheme))
	utilruntime.Must(barv1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(barv1.SchemeGroupVersion, barv1alpha1.SchemeGroupVersion))
}
