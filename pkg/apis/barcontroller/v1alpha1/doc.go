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
// +k8s:conversion-gen=github.com/barcontroller/bar-controller/pkg/apis/barcontroller
// +groupName=barcontroller.dev

// Package v1alpha1 is version v1alpha1 of the Bar API: a Bar asks for a
// Deployment of a given name, size and image, and bar-controller makes it so.
//
// v1 supersedes it (see pkg/apis/barcontroller/v1): it groups the spec into
// spec.deployment and spec.template and adds the container's resources,
// which v1alpha1 carries in the ResourcesAnnotation so that reading and
// writing a Bar through v1alpha1 keeps them. conversion.go converts the
// fields that changed shape; zz_generated.conversion.go the rest.
package v1alpha1
