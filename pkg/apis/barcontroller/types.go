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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The hub has the shape of v1, the newest version: every v1 field has a place
// here as it is, and v1alpha1's flat spec maps onto it (deploymentName ->
// Deployment.Name, image -> Template.Image). Fields stay pointers where a
// version distinguishes "unset" from the zero value (Replicas), because the
// hub must not decide defaults: the API server applies each version's
// schema defaults before anything is converted.

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Bar asks for one Deployment and reports how it is doing.
type Bar struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   BarSpec
	Status BarStatus
}

// BarSpec is the desired state of a Bar.
type BarSpec struct {
	// Replicas is how many Pods the Deployment runs; nil means the version's
	// default was not applied (objects that skipped admission).
	Replicas *int32
	// Deployment says which Deployment the Bar manages.
	Deployment BarDeployment
	// Template says what the Deployment's Pods run.
	Template BarPodTemplate
}

// BarDeployment identifies the managed Deployment.
type BarDeployment struct {
	// Name of the Deployment in the Bar's namespace.
	Name string
}

// BarPodTemplate is what the Deployment's Pods run.
type BarPodTemplate struct {
	// Image is the container image.
	Image string
	// Resources are the container's compute resources. v1alpha1 has no field
	// for them; it carries them in an annotation (see
	// v1alpha1.ResourcesAnnotation) so that they survive a round trip.
	Resources corev1.ResourceRequirements
}

// BarStatus is the observed state of a Bar.
type BarStatus struct {
	ObservedGeneration int64
	AvailableReplicas  int32
	Conditions         []metav1.Condition
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BarList is a list of Bars.
type BarList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Bar
}
