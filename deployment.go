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
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

const (
	// barLabel carries (a label-safe form of) the owning Bar's name on the
	// Deployment and its Pods, and is the Deployment's whole selector.
	barLabel = "barcontroller.dev/bar"
	// managedByLabel is the well-known label that tells people and tools
	// which program manages an object.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "bar-controller"
	// containerName is the one container of the Pod template. It is fixed so
	// a changed image is an in-place edit of the same container.
	containerName = "app"
)

// newDeployment returns the Deployment a Bar asks for, as the apply
// configuration the controller sends with server-side apply. It reads
// nothing but the Bar, so it is easy to test and safe to call from any
// goroutine. Every field set here is a field the controller owns: set a
// field and the controller will force it back after any edit; leave it out
// and others may own it.
func newDeployment(bar *barv1alpha1.Bar) *appsv1ac.DeploymentApplyConfiguration {
	labels := selectorLabels(bar)
	d := appsv1ac.Deployment(bar.Spec.DeploymentName, bar.Namespace).
		WithLabels(map[string]string{managedByLabel: managedByValue}).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(barv1alpha1.SchemeGroupVersion.String()).
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
					WithContainers(corev1ac.Container().
						WithName(containerName).
						WithImage(desiredImage(bar))))))
	return withDesiredHash(d)
}

// desiredReplicas and desiredImage fall back to the API defaults for Bars
// that never passed admission (only possible in tests or with a CRD that
// lost its defaults); a Bar from a real API server always has both set.
func desiredReplicas(bar *barv1alpha1.Bar) int32 {
	if bar.Spec.Replicas == nil {
		return 1
	}
	return *bar.Spec.Replicas
}

func desiredImage(bar *barv1alpha1.Bar) string {
	if bar.Spec.Image == "" {
		return barv1alpha1.DefaultImage
	}
	return bar.Spec.Image
}

// selectorLabels are the labels that tie a Deployment's Pods to one Bar. A
// Bar name can be a 253-character DNS subdomain but a label value holds at
// most 63 characters, so long names are shortened and made unique again with
// a hash of the full name. The value must never change for a given Bar:
// a Deployment's selector is immutable.
func selectorLabels(bar *barv1alpha1.Bar) map[string]string {
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
		if !hasContainer(have.Spec.Template.Spec.Containers, *wc.Name, *wc.Image) {
			diff = append(diff, "spec.template.spec.containers["+*wc.Name+"]")
		}
	}
	return diff
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
			if h.UID == *w.UID && h.APIVersion == *w.APIVersion && h.Kind == *w.Kind && h.Name == *w.Name &&
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

func hasContainer(have []corev1.Container, name, image string) bool {
	for _, c := range have {
		if c.Name == name {
			return c.Image == image
		}
	}
	return false
}

func boolValue(b *bool) bool { return b != nil && *b }
