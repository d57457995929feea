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

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/internal/shards"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

const (
	// barLabel carries (a label-safe form of) the owning Bar's name on the
	// Deployment and its Pods, and is the Deployment's whole selector.
	barLabel = "barcontroller.dev/bar"
	// managedByLabel is the well-known label that tells people and tools
	// which program manages an object.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "bar-controller"

	// managedSelector and othersSelector split every Deployment between
	// the two Deployment informers (main.go): each is in exactly one.
	managedSelector = managedByLabel + "=" + managedByValue
	othersSelector  = managedByLabel + "!=" + managedByValue

	// containerName is the one container of the Pod template. It is fixed so
	// a changed image is an in-place edit of the same container.
	containerName = "app"
)

// newDeployment returns the Deployment a Bar asks for, as the apply
// configuration the controller sends with server-side apply, stamped with
// its hash (withDesiredHash). It reads nothing but the Bar, so it is easy
// to test and safe to call from any goroutine. Every field set here is a
// field the controller owns: set a field and the controller will force it
// back after any edit; leave it out and others may own it.
func newDeployment(bar *barv1.Bar) *appsv1ac.DeploymentApplyConfiguration {
	return withDesiredHash(desiredDeployment(bar))
}

// desiredDeployment is newDeployment without the hash. The hash costs
// more than the rest (a JSON encoding and a SHA-256) and only a write or a
// value that differs reads it, so a sync that finds the Deployment as
// wanted, the common case, never computes it (applyDeployment).
func desiredDeployment(bar *barv1.Bar) *appsv1ac.DeploymentApplyConfiguration {
	labels := selectorLabels(bar)
	return appsv1ac.Deployment(bar.Spec.Deployment.Name, bar.Namespace).
		WithLabels(map[string]string{managedByLabel: managedByValue}).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(barv1.SchemeGroupVersion.String()).
			WithKind("Bar").
			WithName(bar.Name).
			WithUID(bar.UID).
			WithController(true).
			// Foreground deletion of the Bar waits for the Deployment.
			WithBlockOwnerDeletion(true)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(desiredReplicas(bar)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().
					WithContainers(desiredContainer(bar)))))
}

// wantDeployment is desiredDeployment for this controller: sharded, the
// Deployment also carries its Bar's bucket (shards.BucketLabel), which
// puts it in the shard's Deployment cache (InShard). A Deployment of an
// unsharded controller gains the label at the first sync after --shards
// goes above 1: one apply each, once.
func (c *Controller) wantDeployment(bar *barv1.Bar) *appsv1ac.DeploymentApplyConfiguration {
	want := desiredDeployment(bar)
	if c.shard != nil {
		want.WithLabels(map[string]string{shards.BucketLabel: shards.BucketValue(bar.UID)})
	}
	return want
}

// deploymentObject is want as the object a create sends: the fields
// newDeployment sets, copied. (Reading want's JSON as a Deployment gives
// the same object, at a cost of 69 allocations instead of 15, 3 % of the
// controller's CPU in a cold start of 2,000 Bars.)
// TestDeploymentObjectIsTheApplyConfiguration compares the two, so a field
// newDeployment starts to set and this leaves out fails there.
func deploymentObject(want *appsv1ac.DeploymentApplyConfiguration) (*appsv1.Deployment, error) {
	spec := want.Spec
	if want.Name == nil || want.Namespace == nil || spec == nil || spec.Replicas == nil ||
		spec.Selector == nil || spec.Template == nil || spec.Template.Spec == nil {
		return nil, fmt.Errorf("desired Deployment lacks a field newDeployment sets")
	}
	d := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{Kind: ptr.Deref(want.Kind, ""), APIVersion: ptr.Deref(want.APIVersion, "")},
		ObjectMeta: metav1.ObjectMeta{
			Name:        *want.Name,
			Namespace:   *want.Namespace,
			Labels:      maps.Clone(want.Labels),
			Annotations: maps.Clone(want.Annotations),
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(*spec.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: maps.Clone(spec.Selector.MatchLabels)},
		},
	}
	for _, ref := range want.OwnerReferences {
		d.OwnerReferences = append(d.OwnerReferences, metav1.OwnerReference{
			APIVersion:         ptr.Deref(ref.APIVersion, ""),
			Kind:               ptr.Deref(ref.Kind, ""),
			Name:               ptr.Deref(ref.Name, ""),
			UID:                ptr.Deref(ref.UID, ""),
			Controller:         copyPtr(ref.Controller),
			BlockOwnerDeletion: copyPtr(ref.BlockOwnerDeletion),
		})
	}
	d.Spec.Template.Labels = maps.Clone(spec.Template.Labels)
	for _, c := range spec.Template.Spec.Containers {
		container := corev1.Container{Name: ptr.Deref(c.Name, ""), Image: ptr.Deref(c.Image, "")}
		if r := c.Resources; r != nil {
			// Copies: the lists are the cached Bar's own.
			container.Resources.Requests = ptrValue(r.Requests).DeepCopy()
			container.Resources.Limits = ptrValue(r.Limits).DeepCopy()
		}
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, container)
	}
	return d, nil
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}

// desiredContainer is the Pod template's one container. Resources are set
// only when the Bar has some: a Bar without them then asks for exactly the
// Deployment the v1alpha1 releases applied (which had no such field), so an
// upgrade finds every Deployment as wanted and writes none.
func desiredContainer(bar *barv1.Bar) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().WithName(containerName).WithImage(desiredImage(bar))
	if r := bar.Spec.Template.Resources; len(r.Requests) > 0 || len(r.Limits) > 0 {
		rac := corev1ac.ResourceRequirements()
		if len(r.Requests) > 0 {
			rac.WithRequests(r.Requests)
		}
		if len(r.Limits) > 0 {
			rac.WithLimits(r.Limits)
		}
		c.WithResources(rac)
	}
	return c
}

// desiredReplicas and desiredImage fall back to the API defaults for Bars
// that never passed admission (only possible in tests or with a CRD that
// lost its defaults); a Bar from a real API server always has both set.
func desiredReplicas(bar *barv1.Bar) int32 {
	if bar.Spec.Replicas == nil {
		return 1
	}
	return *bar.Spec.Replicas
}

func desiredImage(bar *barv1.Bar) string {
	if bar.Spec.Template.Image == "" {
		return barv1.DefaultImage
	}
	return bar.Spec.Template.Image
}

// selectorLabels are the labels that tie a Deployment's Pods to one Bar. A
// Bar name can be a 253-character DNS subdomain but a label value holds at
// most 63 characters, so long names are shortened and made unique again with
// a hash of the full name. The value must never change for a given Bar:
// a Deployment's selector is immutable.
func selectorLabels(bar *barv1.Bar) map[string]string {
	return map[string]string{barLabel: labelValue(bar.Name)}
}

func labelValue(name string) string {
	const maxLen = 63 // validation.LabelValueMaxLength
	if len(name) <= maxLen {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:10]
	// A label value must end in an alphanumeric character, so the cut must
	// not leave a trailing '-' or '.' before the separator.
	prefix := strings.TrimRight(name[:maxLen-len(suffix)-1], "-.")
	return prefix + "-" + suffix
}

// deploymentDiff lists the fields that want sets and the cached Deployment
// lacks, or has other values for; nil means it matches. Fields want does not
// mention (defaults, other containers, annotations someone added) are
// ignored, just as server-side apply leaves them alone. deploymentDrift
// (ownership.go) uses it when what the controller wants changed since its
// last apply; otherwise ownership, not values, decides. The names are what
// the --trace output and the DeploymentUpdated event list.
func deploymentDiff(want *appsv1ac.DeploymentApplyConfiguration, have *appsv1.Deployment) []string {
	var diff []string
	if !containsAll(have.Labels, want.Labels) {
		diff = append(diff, "metadata.labels")
	}
	if !hasOwnerReference(have.OwnerReferences, want.OwnerReferences) {
		diff = append(diff, "metadata.ownerReferences")
	}
	spec := want.Spec
	if have.Spec.Replicas == nil || *have.Spec.Replicas != *spec.Replicas {
		diff = append(diff, "spec.replicas")
	}
	if have.Spec.Selector == nil || len(have.Spec.Selector.MatchExpressions) != 0 ||
		!equalLabels(have.Spec.Selector.MatchLabels, spec.Selector.MatchLabels) {
		diff = append(diff, "spec.selector")
	}
	if !containsAll(have.Spec.Template.Labels, spec.Template.Labels) {
		diff = append(diff, "spec.template.metadata.labels")
	}
	for _, wc := range spec.Template.Spec.Containers {
		hc := findContainer(have.Spec.Template.Spec.Containers, *wc.Name)
		if hc == nil || hc.Image != *wc.Image {
			diff = append(diff, "spec.template.spec.containers["+*wc.Name+"]")
		}
		// Compared whether the Bar sets them or not: resources the
		// controller applied and the Bar no longer asks for must go. Whose
		// resources a Deployment has that the Bar does not ask for is then
		// for deploymentDrift to judge, by ownership.
		if hc != nil && !equalResources(hc.Resources, wc.Resources) {
			diff = append(diff, resourcesField(*wc.Name))
		}
	}
	return diff
}

// resourcesField is deploymentDiff's name of a container's resources.
func resourcesField(container string) string {
	return "spec.template.spec.containers[" + container + "].resources"
}

// equalResources compares quantities by value: the API server keeps them
// in canonical form ("0.1" comes back as "100m").
func equalResources(have corev1.ResourceRequirements, want *corev1ac.ResourceRequirementsApplyConfiguration) bool {
	var requests, limits corev1.ResourceList
	if want != nil {
		requests, limits = ptrValue(want.Requests), ptrValue(want.Limits)
	}
	return equalQuantities(have.Requests, requests) && equalQuantities(have.Limits, limits)
}

func ptrValue(l *corev1.ResourceList) corev1.ResourceList {
	if l == nil {
		return nil
	}
	return *l
}

func equalQuantities(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, qa := range a {
		qb, ok := b[name]
		if !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func equalLabels(a, b map[string]string) bool {
	return len(a) == len(b) && containsAll(a, b)
}

func hasOwnerReference(have []metav1.OwnerReference, want []metav1ac.OwnerReferenceApplyConfiguration) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.UID == *w.UID && sameGroup(h.APIVersion, *w.APIVersion) && h.Kind == *w.Kind && h.Name == *w.Name &&
				boolValue(h.Controller) == boolValue(w.Controller) &&
				boolValue(h.BlockOwnerDeletion) == boolValue(w.BlockOwnerDeletion) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func findContainer(have []corev1.Container, name string) *corev1.Container {
	for i := range have {
		if have[i].Name == name {
			return &have[i]
		}
	}
	return nil
}

func boolValue(b *bool) bool { return b != nil && *b }

// sameGroup compares the groups of two apiVersions and not their versions:
// an owner reference names its owner by UID, and the version it was written
// with does not change which object that is. Deployments written by a
// v1alpha1 release say barcontroller.dev/v1alpha1; taking that for drift
// would rewrite every Deployment on upgrade. Their next real change brings
// v1 along. (The garbage collector does read the version, to find the
// owner's resource: a release that stops serving v1alpha1 must rewrite
// the references first; docs/api-versions.md.)
func sameGroup(a, b string) bool {
	ga, errA := schema.ParseGroupVersion(a)
	gb, errB := schema.ParseGroupVersion(b)
	return errA == nil && errB == nil && ga.Group == gb.Group
}
