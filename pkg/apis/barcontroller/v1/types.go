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

package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultImage is what a Bar runs when spec.template.image is left out. It
// must equal the +kubebuilder:default on BarPodTemplate.Image (a unit test
// holds them together): the API server applies the marker at admission, and
// the controller falls back to this constant only for objects that never went
// through admission. It is the same image as v1alpha1's default, so a Bar
// means the same thing in either version.
const DefaultImage = "nginx:1.28.0"

// v1 is the storage version: the API server writes every Bar as v1, the
// version the controller reads, so that a client of v1 needs no conversion
// once every object has been written (or migrated) since the upgrade, and a
// later release can stop serving v1alpha1. Reads and writes in v1alpha1, and
// reads of objects still stored as v1alpha1, go through the conversion
// webhook (internal/conversion), which the CRD names in spec.conversion.

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:path=bars,singular=bar,scope=Namespaced,shortName=br
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.availableReplicas
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=".spec.deployment.name"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=".status.availableReplicas"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"

// Bar asks for one Deployment, named by spec.deployment.name, running
// spec.replicas Pods as spec.template describes them. The controller creates
// the Deployment, keeps it the way the Bar says, and reports how it is doing
// in status.
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
	// replicas is how many Pods the Deployment should run. 0 keeps the
	// Deployment but stops its Pods. It is the field the scale subresource
	// reads and writes (kubectl scale, HorizontalPodAutoscaler).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// deployment says which Deployment this Bar manages.
	// +required
	Deployment BarDeployment `json:"deployment"`

	// template describes the Pods of the Deployment. Left out, the Pods run
	// the default image with no resource requests or limits.
	// +optional
	// +kubebuilder:default={}
	Template BarPodTemplate `json:"template"`
}

// BarDeployment identifies the Deployment a Bar manages. It is a struct of its
// own, rather than a name string, so that what the Bar says about its
// Deployment (labels, strategy) can later be added next to the name without
// another version.
type BarDeployment struct {
	// name of the Deployment, in the Bar's namespace. Changing it replaces
	// the old Deployment with a new one: the old one keeps serving until the
	// new one has all replicas available (condition reason Renaming).
	// It must be a lowercase RFC 1123 subdomain; the limit of 242 characters
	// (not 253) leaves room for the "-<pod-template-hash>" suffix that the
	// Deployment's ReplicaSets add to this name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=242
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a lowercase RFC 1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (e.g. 'web' or 'web.v2')"
	Name string `json:"name"`
}

// BarPodTemplate is what each Pod of the Deployment runs: one container. It
// is named after the Deployment's spec.template but holds only what a Bar
// lets users choose; the controller writes the rest.
type BarPodTemplate struct {
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

	// resources are the compute resources of the container: what the
	// scheduler reserves for each Pod (requests) and what the kubelet
	// enforces (limits). Namespaces with a ResourceQuota on cpu or memory
	// admit only Pods that set them, so there a Bar needs resources to run
	// at all. Each value is checked by the Deployment's own validation (for
	// example that a request does not exceed its limit): a Bar the Deployment
	// would refuse reports it in its Ready condition (reason ApplyFailed).
	// claims are not supported: they name Pod-level resourceClaims, which a
	// Bar's Pods do not have.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.claims) || size(self.claims) == 0",message="claims are not supported: a Bar's Pods have no resourceClaims to refer to"
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
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
// scripts may match on them. They are the same strings as in v1alpha1: a
// condition does not change meaning with the version it is read in.
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
	// ReasonRenaming: spec.deployment.name changed; the Deployment under the
	// old name keeps serving until the new one has all replicas available,
	// then it is deleted. The message names both.
	ReasonRenaming = "Renaming"
	// ReasonDeploymentNotOwned: a Deployment with the wanted name exists but
	// is not controlled by this Bar, so the controller leaves it alone.
	// Rename or delete that Deployment, or pick another spec.deployment.name.
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
