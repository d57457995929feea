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
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// What a Bar's Deployment looks like is part of the Bar API's contract
// (the labels tools select on, the container name kubectl set image
// uses), so these values are the ones bar-controller writes: the bench
// compares two controllers doing the same job on the same objects.
const (
	// barLabel ties a Deployment and its Pods to one Bar; it is the whole
	// selector.
	barLabel = "barcontroller.dev/bar"
	// managedByLabel is the well-known label that tells people and tools
	// which program manages an object.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "bar-controller"
	// containerName is fixed so that a new image is an edit of the same
	// container, not a second one.
	containerName = "app"
)

// deploymentFor is the object handed to CreateOrUpdate: only the key.
// CreateOrUpdate fills it from the cache, or leaves it empty for a create,
// and mutateDeployment then sets what the Bar decides.
func deploymentFor(bar *barv1.Bar) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Name:      bar.Spec.Deployment.Name,
		Namespace: bar.Namespace,
	}}
}

// mutateDeployment is the body of CreateOrUpdate's mutate function: it
// sets on d every field the Bar decides and leaves every other field as it
// found it. That second half is what keeps CreateOrUpdate from writing on
// every reconcile: d comes from the cache with the API server's defaults
// filled in (strategy, pull policy, termination message path...), and
// CreateOrUpdate compares d before and after this call; replacing the
// container or the template wholesale would wipe the defaults and make
// every comparison differ. It does no I/O: the scheme is only read, to
// name the Bar's kind in the owner reference.
func mutateDeployment(bar *barv1.Bar, d *appsv1.Deployment, scheme *runtime.Scheme) error {
	selector := selectorLabels(bar)

	// Labels are merged, not replaced: others (kubectl label, policy
	// engines) may add their own.
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	d.Labels[managedByLabel] = managedByValue
	for k, v := range selector {
		d.Labels[k] = v
	}

	// Controller and BlockOwnerDeletion: the garbage collector deletes
	// the Deployment with its Bar, and a foreground deletion of the Bar
	// waits for it.
	if err := controllerutil.SetControllerReference(bar, d, scheme); err != nil {
		return err
	}

	d.Spec.Replicas = ptr.To(desiredReplicas(bar))
	// The selector is immutable after create. Setting it every time is
	// harmless (the value never changes for a Bar, see selectorLabels) and
	// keeps the create and update paths one.
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: selector}
	if d.Spec.Template.Labels == nil {
		d.Spec.Template.Labels = map[string]string{}
	}
	for k, v := range selector {
		d.Spec.Template.Labels[k] = v
	}

	// Edit the one container in place, and leave any other container
	// (a sidecar someone injected) alone.
	c := findContainer(d.Spec.Template.Spec.Containers, containerName)
	if c == nil {
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: containerName})
		c = &d.Spec.Template.Spec.Containers[len(d.Spec.Template.Spec.Containers)-1]
	}
	c.Image = desiredImage(bar)
	// The Bar is the source of truth for resources: a Bar without any
	// asks for none, so resources it no longer lists are removed.
	// (CreateOrUpdate compares with equality.Semantic, which compares
	// quantities by value, so "0.1" against the stored "100m" is no
	// change.)
	c.Resources = *bar.Spec.Template.Resources.DeepCopy()
	return nil
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// desiredReplicas and desiredImage fall back to the CRD's defaults for a
// Bar that never went through admission (tests, or a CRD without its
// defaults); a Bar read from a real API server has both set.
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

// selectorLabels are the labels that select a Bar's Pods. They must never
// change for a given Bar, since a Deployment's selector is immutable.
func selectorLabels(bar *barv1.Bar) map[string]string {
	return map[string]string{barLabel: labelValue(bar.Name)}
}

// labelValue fits a Bar name (a DNS subdomain, up to 253 characters) into
// a label value (at most 63): a longer name keeps its start and gets a
// hash of the whole name, so that two long names that share a prefix
// still differ.
func labelValue(name string) string {
	const maxLen = 63
	if len(name) <= maxLen {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:10]
	// A label value must end in an alphanumeric character.
	prefix := strings.TrimRight(name[:maxLen-len(suffix)-1], "-.")
	return prefix + "-" + suffix
}

// readiness is the Bar's Ready condition without its timestamps.
type readiness struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// warningReasons are the Ready reasons a Warning Event announces when a
// Bar enters them: problems a person has to act on.
var warningReasons = map[string]bool{
	barv1.ReasonDeploymentNotOwned:       true,
	barv1.ReasonApplyFailed:              true,
	barv1.ReasonProgressDeadlineExceeded: true,
}

// deploymentReadiness judges a Deployment the Bar controls, by the rules
// the Bar API documents for its Ready reasons.
func deploymentReadiness(bar *barv1.Bar, d *appsv1.Deployment) readiness {
	want := desiredReplicas(bar)
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return readiness{metav1.ConditionFalse, barv1.ReasonProgressDeadlineExceeded,
				fmt.Sprintf("Deployment %s is not making progress: %s", d.Name, c.Message)}
		}
	}
	// Until the Deployment controller has observed the latest spec, its
	// counts describe the previous one and cannot make the Bar ready.
	settled := d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas == want && d.Status.Replicas == want
	switch {
	case settled && want == 0:
		return readiness{metav1.ConditionTrue, barv1.ReasonScaledToZero,
			fmt.Sprintf("Deployment %s is scaled to zero", d.Name)}
	case settled && d.Status.AvailableReplicas >= want:
		return readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable,
			fmt.Sprintf("%d of %d replicas of Deployment %s are available", d.Status.AvailableReplicas, want, d.Name)}
	default:
		return readiness{metav1.ConditionFalse, barv1.ReasonReplicasUnavailable,
			fmt.Sprintf("waiting for Deployment %s to have %d available replicas (it has %d replicas: %d up to date, %d available)",
				d.Name, want, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas)}
	}
}

// renamingReadiness is the Ready condition while the Deployments under
// old names keep serving and the new one, judged r, is not available yet.
func renamingReadiness(bar *barv1.Bar, r readiness, d *appsv1.Deployment, old []appsv1.Deployment) readiness {
	names := make([]string, len(old))
	for i := range old {
		names[i] = old[i].Name
	}
	oldNames := strings.Join(names, ", ")
	if r.reason == barv1.ReasonProgressDeadlineExceeded {
		return readiness{metav1.ConditionFalse, r.reason,
			fmt.Sprintf("%s; Deployment %s, from before the Bar was renamed, keeps serving until %s is available", r.message, oldNames, d.Name)}
	}
	return readiness{metav1.ConditionFalse, barv1.ReasonRenaming,
		fmt.Sprintf("renamed from Deployment %s to %s: %s keeps serving until %s has %d available replicas (it has %d)",
			oldNames, d.Name, oldNames, d.Name, desiredReplicas(bar), d.Status.AvailableReplicas)}
}

// notOwnedReadiness explains why the Bar leaves a Deployment alone.
func notOwnedReadiness(d *appsv1.Deployment) readiness {
	owner := "no controller"
	if ref := metav1.GetControllerOf(d); ref != nil {
		owner = fmt.Sprintf("controller %s %s", ref.Kind, ref.Name)
	}
	return readiness{metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned,
		fmt.Sprintf("Deployment %s already exists with %s, so this Bar does not manage it; "+
			"delete or rename that Deployment, or choose another spec.deployment.name", d.Name, owner)}
}
