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

// +k8s:deepcopy-gen=package

// Package barcontroller is the internal version of the Bar API: the hub that
// every served version (v1alpha1, v1) converts to and from, the way
// Kubernetes' own API groups do it (k8s.io/kubernetes/pkg/apis/apps,
// k8s.io/apiextensions-apiserver/pkg/apis/apiextensions).
//
// Nothing outside this repository ever sees these types: they are never
// served, never stored, never serialized (so they carry no JSON tags). Their
// only job is to hold everything any version can say, so that converting
// version A -> hub -> version B -> hub -> version A loses nothing.
// conversion-gen (run by hack/update-codegen.sh) writes the field-by-field
// conversions between each version and this package; the few fields whose
// shape differs are converted by hand in the version's conversion.go.
//
// The package has no +groupName and no +genclient: controller-gen (CRDs) and
// client-gen only look at the versioned packages.
package barcontroller
