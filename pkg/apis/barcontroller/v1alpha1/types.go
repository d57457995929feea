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
)

// DefaultImage is what a Bar runs when spec.image is left out. It must equal
// the +kubebuilder:default on BarSpec.Image (a unit test holds them together):
// the API server applies the marker at admission, and the controller falls
// back to this constant only for objects that never went through admission.
const DefaultImage = "nginx:1.28.0"

// v1alpha1 is served, deprecated: kubectl and client-go print the warning
// below with every response in this version. It is no longer stored; the
// conversion webhook translates to and from v1.

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:deprecatedversion:warning="barcontroller.dev/v1alpha1 Bar is deprecated; use barcontroller.dev/v1 (spec.deploymentName is spec.deployment.name, spec.image is spec.template.image)"
// +kubebuilder:resource:path=bars,singular=bar,scope=Namespaced,shortName=br
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.availableReplicas
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=".spec.deploymentName"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=".status.availableReplicas"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"

// Bar asks for one Deployment, named by spec.deploymentName, running
// spec.replicas copies of spec.image. The controller creates it, keeps it the
// way the Bar says, and reports how it is doing in status.
// Version v1 has more fields: the container's resources (spec.template.resources
// in v1) appear here as JSON in the annotation
// barcontroller.dev/v1-template-resources; keep it when writing the Bar back
// to keep them. Change them in v1: a change of the annotation alone would
// not change metadata.generation, and is refused.
type Bar struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the user wants.
	// +required
	Spec BarSpec `json:"spec"`

	// status is what the controller last saw.
	// +optional
	Status BarStatus `json:"status,omitempty"`
}

// BarSpec is the desired state of a Bar.
type BarSpec struct {
	// deploymentName names the Deployment this Bar manages, in the Bar's
	// namespace. Changing it replaces the old Deployment with a new one.
	// It must be a lowercase RFC 1123 subdomain; the limit of 242 characters
	// (not 253) leaves room for the "-<pod-template-hash>" suffix that the
	// Deployment's ReplicaSets add to this name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=242
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a lowercase RFC 1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (e.g. 'web' or 'web.v2')"
	DeploymentName string `json:"deploymentName"`

	// replicas is how many Pods the Deployment should run. 0 keeps the
	// Deployment but stops its Pods.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the container image the Pods run. It must be pinned to a tag
	// or a digest: an untagged image or ":latest" could change under a
	// running Deployment without the Bar changing.
	// +optional
	// +kubebuilder:default="nginx:1.28.0"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([a-z0-9._/-]*[a-z0-9])?(:[0-9]+/[a-z0-9._/-]*[a-z0-9])?(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",message="must be a container image reference such as 'nginx:1.28.0' or 'registry.example.com/team/app@sha256:<digest>' (lowercase name, optional registry host:port, then a tag or a sha256 digest)"
	// +kubebuilder:validation:XValidation:rule="self.contains('@') || self.matches(':[^:/]+$')",message="must name a tag or digest, e.g. 'nginx:1.28.0'; an untagged image means ':latest'"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':latest')",message="must not use the ':latest' tag; pin a version tag or a digest"
	Image string `json:"image,omitempty"`
}

// BarStatus is the observed state of a Bar.
type BarStatus struct {
	// observedGeneration is the metadata.generation of the Bar that this
	// status describes. While it is behind, the status is stale.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// availableReplicas is the number of available Pods of the Deployment.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// conditions describe the Bar's state. "Ready" is True when the
	// Deployment exists, is controlled by this Bar, matches its spec and has
	// all wanted replicas available; its reason says what to do otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// ConditionReady is the condition type that summarizes a Bar.
const ConditionReady = "Ready"

// Reasons of the Ready condition. They are part of the API: alerts and
// scripts may match on them.
const (
	// ReasonDeploymentAvailable: all wanted replicas are available.
	ReasonDeploymentAvailable = "DeploymentAvailable"
	// ReasonScaledToZero: spec.replicas is 0 and the Deployment has no Pods.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonReplicasUnavailable: the Deployment exists but fewer replicas
	// than wanted are available yet (rolling out, scheduling, pulling).
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonProgressDeadlineExceeded: the Deployment stopped making progress;
	// look at its Pods and events.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonRenaming: spec.deploymentName changed; the Deployment under the
	// old name keeps serving until the new one has all replicas available,
	// then it is deleted. The message names both.
	ReasonRenaming = "Renaming"
	// ReasonDeploymentNotOwned: a Deployment with the wanted name exists but
	// is not controlled by this Bar, so the controller leaves it alone.
	// Rename or delete that Deployment, or pick another deploymentName.
	ReasonDeploymentNotOwned = "DeploymentNotOwned"
	// ReasonApplyFailed: the API server refused the Deployment the
	// controller asked for; the message carries its answer.
	ReasonApplyFailed = "ApplyFailed"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// BarList is a list of Bars.
type BarList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Bar `json:"items"`
}
