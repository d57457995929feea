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
	"context"
	"fmt"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/apply"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barac "github.com/barcontroller/bar-controller/pkg/generated/applyconfiguration/barcontroller/v1"
)

// readiness is the Ready condition of a Bar minus its timestamps, so that two
// of them compare equal exactly when nothing a person would care about moved.
type readiness struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// deploymentReadiness judges a Deployment that the Bar controls.
func deploymentReadiness(bar *barv1.Bar, d *appsv1.Deployment) readiness {
	want := desiredReplicas(bar)
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse &&
			c.Reason == "ProgressDeadlineExceeded" {
			return readiness{metav1.ConditionFalse, barv1.ReasonProgressDeadlineExceeded,
				fmt.Sprintf("Deployment %s is not making progress: %s", d.Name, c.Message)}
		}
	}
	// Until the Deployment controller has seen our last change, its replica
	// counts describe the old spec and cannot make the Bar ready.
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

// renamingReadiness is the Ready condition while a rename waits for the new
// Deployment (d, judged r) to become available and old Deployments keep
// serving (sync.go: make before break).
func renamingReadiness(bar *barv1.Bar, r readiness, d *appsv1.Deployment, old []metav1.Object) readiness {
	names := oldNames(old)
	if r.reason == barv1.ReasonProgressDeadlineExceeded {
		return readiness{metav1.ConditionFalse, r.reason,
			fmt.Sprintf("%s; Deployment %s, from before the Bar was renamed, keeps serving until %s is available", r.message, names, d.Name)}
	}
	return readiness{metav1.ConditionFalse, barv1.ReasonRenaming,
		fmt.Sprintf("renamed from Deployment %s to %s: %s keeps serving until %s has %d available replicas (it has %d)",
			names, d.Name, names, d.Name, desiredReplicas(bar), d.Status.AvailableReplicas)}
}

// warningReasons are the Ready reasons announced by a Warning event when a
// Bar enters them: problems a person has to act on.
var warningReasons = map[string]bool{
	barv1.ReasonDeploymentNotOwned:       true,
	barv1.ReasonApplyFailed:              true,
	barv1.ReasonProgressDeadlineExceeded: true,
}

// notOwnedReadiness explains why the controller leaves a Deployment alone.
func notOwnedReadiness(d metav1.Object) readiness {
	owner := "no controller"
	if ref := metav1.GetControllerOfNoCopy(d); ref != nil {
		owner = fmt.Sprintf("controller %s %s", ref.Kind, ref.Name)
	}
	return readiness{metav1.ConditionFalse, barv1.ReasonDeploymentNotOwned,
		fmt.Sprintf("Deployment %s already exists with %s, so this Bar does not manage it; "+
			"delete or rename that Deployment, or choose another spec.deployment.name", d.GetName(), owner)}
}

// newStatus is the status a Bar should have. now stamps the Ready condition
// only when its status flips, as the API conventions ask.
func newStatus(bar *barv1.Bar, available int32, r readiness, now metav1.Time) barv1.BarStatus {
	status := barv1.BarStatus{
		ObservedGeneration: bar.Generation,
		AvailableReplicas:  available,
		// Keep conditions other writers may have added; we own only Ready.
		Conditions: append([]metav1.Condition(nil), bar.Status.Conditions...),
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               barv1.ConditionReady,
		Status:             r.status,
		Reason:             r.reason,
		Message:            clipMessage(r.message),
		ObservedGeneration: bar.Generation,
		LastTransitionTime: now,
	})
	return status
}

// maxMessageBytes is metav1.Condition's limit on a message, which the
// CRD's schema enforces: a longer one would get every status write of
// the Bar refused, and its status would stay stale for as long as the
// message stays long.
const maxMessageBytes = 32768

// clipMessage is msg cut to maxMessageBytes, on a rune boundary, marked
// as cut. A message quotes the API server's errors and names Deployments,
// and a Bar can make either long: hundreds of invalid resource names, or
// many old Deployments it renames away from (issue 39, twelfth review).
func clipMessage(msg string) string {
	const mark = " ... (cut)"
	if len(msg) <= maxMessageBytes {
		return msg
	}
	cut := maxMessageBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + mark
}

// statusChanged reports whether writing want over have would change
// anything but a timestamp.
func statusChanged(have, want *barv1.BarStatus) bool {
	if have.ObservedGeneration != want.ObservedGeneration || have.AvailableReplicas != want.AvailableReplicas {
		return true
	}
	h := meta.FindStatusCondition(have.Conditions, barv1.ConditionReady)
	w := meta.FindStatusCondition(want.Conditions, barv1.ConditionReady)
	if h == nil || w == nil {
		return h != w
	}
	return h.Status != w.Status || h.Reason != w.Reason || h.Message != w.Message ||
		h.ObservedGeneration != w.ObservedGeneration
}

// statusApplyConfiguration turns a status into the apply request for the
// status subresource. It names only the Ready condition: conditions are a
// map keyed by type, so server-side apply leaves other types to their owners.
//
// It carries the UID and the resourceVersion of the Bar the status was
// judged on, as the Deployment's apply carries its: a status is addressed
// by name, and the Bar may have been deleted and created again under that
// name while the sync ran. Without them the namesake would get the old
// Bar's observedGeneration and Ready condition (Ready=True on a Bar nothing
// has looked at, which kubectl wait and GitOps health checks trust). On
// the status subresource the API server copies the stored metadata over
// the request's before it validates, so a UID that differs is dropped,
// not refused; the resourceVersion is checked before that, and refuses
// the write (Conflict) for the namesake, whose version is newer, as for
// any change to the Bar since the cache read it: the retry judges the Bar
// the caches show next (test/integration TestStatusApplyIsRefusedForANamesake).
func statusApplyConfiguration(bar *barv1.Bar, status *barv1.BarStatus) *barac.BarApplyConfiguration {
	ready := meta.FindStatusCondition(status.Conditions, barv1.ConditionReady)
	ac := barac.Bar(bar.Name, bar.Namespace).WithUID(bar.UID)
	if bar.ResourceVersion != "" {
		ac.WithResourceVersion(bar.ResourceVersion)
	}
	return ac.
		WithStatus(barac.BarStatus().
			WithObservedGeneration(status.ObservedGeneration).
			WithAvailableReplicas(status.AvailableReplicas).
			WithConditions(metav1ac.Condition().
				WithType(ready.Type).
				WithStatus(ready.Status).
				WithReason(ready.Reason).
				WithMessage(ready.Message).
				WithObservedGeneration(ready.ObservedGeneration).
				WithLastTransitionTime(ready.LastTransitionTime)))
}

// applyStatus applies status to the Bar's status subresource, as
// BarInterface.ApplyStatus does, and returns the Bar the API server
// answered with, of which only the metadata is read (and set): the
// controller reads its resourceVersion, and the Bar itself comes through
// the watch.
func (c *Controller) applyStatus(ctx context.Context, bar *barv1.Bar, status *barac.BarApplyConfiguration) (*barv1.Bar, error) {
	client, ok := c.barclientset.BarcontrollerV1().RESTClient().(*rest.RESTClient)
	if !ok || client == nil {
		// A fake clientset (the unit tests) has no REST client. It answers
		// with the whole Bar; only its metadata is passed on, as from a
		// real API server, so that a test fails if a caller starts to read
		// more of the answer than a real one carries.
		updated, err := c.barclientset.BarcontrollerV1().Bars(bar.Namespace).ApplyStatus(ctx, status,
			metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		if err != nil {
			return nil, err
		}
		return &barv1.Bar{TypeMeta: updated.TypeMeta, ObjectMeta: updated.ObjectMeta}, nil
	}
	m, err := metadataAnswer(ctx, func() (*rest.Request, error) {
		req, err := apply.NewRequest(client, status)
		if err != nil {
			return nil, err
		}
		// The query of metav1.ApplyOptions{FieldManager: fieldManager,
		// Force: true}, written out rather than encoded by reflection.
		return req.Namespace(bar.Namespace).Resource("bars").Name(bar.Name).SubResource("status").
			Param("fieldManager", fieldManager).Param("force", "true"), nil
	})
	if err != nil {
		return nil, err
	}
	return &barv1.Bar{TypeMeta: metav1.TypeMeta{APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar"}, ObjectMeta: m}, nil
}
