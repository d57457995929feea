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
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

func TestDeploymentReadiness(t *testing.T) {
	tests := []struct {
		name       string
		replicas   int32
		mutate     func(*appsv1.Deployment)
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"all available", 3, func(*appsv1.Deployment) {}, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable},
		{"scaled to zero", 0, func(*appsv1.Deployment) {}, metav1.ConditionTrue, barv1.ReasonScaledToZero},
		{"still scaling down to zero", 0, func(d *appsv1.Deployment) { d.Status.Replicas = 1 }, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable},
		{"one unavailable", 3, func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 2 }, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable},
		{"rollout not observed yet", 3, func(d *appsv1.Deployment) { d.Generation = 2 }, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable},
		{"old replicas still running", 3, func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable},
		{"surge replicas still running", 3, func(d *appsv1.Deployment) { d.Status.Replicas = 4 }, metav1.ConditionFalse, barv1.ReasonReplicasUnavailable},
		{"progress deadline exceeded", 3, func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas = 0
			d.Status.Conditions = []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
				Message: "ReplicaSet \"web-123\" has timed out progressing.",
			}}
		}, metav1.ConditionFalse, barv1.ReasonProgressDeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bar := newBar("test", "web", tc.replicas)
			d := ownedDeployment(bar)
			tc.mutate(d)
			r := deploymentReadiness(bar, d)
			if r.status != tc.wantStatus || r.reason != tc.wantReason || r.message == "" {
				t.Errorf("got %+v, want status %s reason %s and a message", r, tc.wantStatus, tc.wantReason)
			}
		})
	}
}

func TestNewStatusKeepsTransitionTimeAndOtherConditions(t *testing.T) {
	earlier := metav1.NewTime(fixedNow.Add(-time.Hour))
	bar := withStatus(newBar("test", "web", 1), 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "m")
	bar.Status.Conditions = append(bar.Status.Conditions, metav1.Condition{Type: "Audited", Status: metav1.ConditionTrue, Reason: "ByHand"})

	same := newStatus(bar, 1, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "m2"}, fixedNow)
	if got := same.Conditions[0].LastTransitionTime; !got.Equal(&earlier) {
		t.Errorf("status did not flip but lastTransitionTime moved to %v", got)
	}
	if len(same.Conditions) != 2 || same.Conditions[1].Type != "Audited" {
		t.Errorf("other conditions lost: %+v", same.Conditions)
	}
	flipped := newStatus(bar, 0, readiness{metav1.ConditionFalse, barv1.ReasonReplicasUnavailable, "m"}, fixedNow)
	if got := flipped.Conditions[0].LastTransitionTime; !got.Equal(&fixedNow) {
		t.Errorf("status flipped but lastTransitionTime is %v, want %v", got, fixedNow)
	}
	if len(bar.Status.Conditions) != 2 || bar.Status.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("newStatus modified the cached Bar: %+v", bar.Status.Conditions)
	}
}

func TestStatusChanged(t *testing.T) {
	base := withStatus(newBar("test", "web", 1), 1, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, "m").Status
	tests := []struct {
		name   string
		mutate func(*barv1.BarStatus)
		want   bool
	}{
		{"identical", func(*barv1.BarStatus) {}, false},
		{"only the timestamp", func(s *barv1.BarStatus) { s.Conditions[0].LastTransitionTime = fixedNow }, false},
		{"observedGeneration", func(s *barv1.BarStatus) { s.ObservedGeneration++ }, true},
		{"availableReplicas", func(s *barv1.BarStatus) { s.AvailableReplicas = 0 }, true},
		{"condition status", func(s *barv1.BarStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, true},
		{"condition reason", func(s *barv1.BarStatus) { s.Conditions[0].Reason = "Other" }, true},
		{"condition message", func(s *barv1.BarStatus) { s.Conditions[0].Message = "other" }, true},
		{"condition generation", func(s *barv1.BarStatus) { s.Conditions[0].ObservedGeneration++ }, true},
		{"condition missing", func(s *barv1.BarStatus) { s.Conditions = nil }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			have := *base.DeepCopy()
			tc.mutate(&have)
			if got := statusChanged(&have, &base); got != tc.want {
				t.Errorf("statusChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// A message longer than metav1.Condition allows would get every status
// write refused: it is cut, whole runes, to the limit.
func TestNewStatusClipsTheMessage(t *testing.T) {
	bar := newBar("test", "web", 1)
	for _, msg := range []string{strings.Repeat("é", maxMessageBytes), strings.Repeat("a", maxMessageBytes+1)} {
		got := newStatus(bar, 0, readiness{metav1.ConditionFalse, barv1.ReasonApplyFailed, msg}, fixedNow).Conditions[0].Message
		if len(got) > maxMessageBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "(cut)") {
			t.Errorf("a message of %d bytes became %d bytes (valid UTF-8: %v), ending %q", len(msg), len(got), utf8.ValidString(got), got[len(got)-12:])
		}
	}
	if got := clipMessage("short"); got != "short" {
		t.Errorf("clipMessage(short) = %q", got)
	}
}
