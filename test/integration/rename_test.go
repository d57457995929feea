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

package integration

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// A rename is make before break: the Deployment under the old name keeps
// serving until the one under the new name is available, however long that
// takes. Here the new one cannot become available at all for a while: a
// ResourceQuota with room for the old Pod only, as in a namespace whose
// quota is full. The old Deployment must stay, the Bar must say why, a
// Warning must come once the new Deployment passes its progress deadline,
// and the old one must go once the quota makes room and the new one is
// available.
func TestRenameKeepsOldDeploymentUntilNewIsAvailable(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	createBar(t, env, ns, "mbb", "first", 1)
	waitForReady(t, env, ns, "mbb", 1)

	quota, err := env.kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "full"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Until the quota controller has counted the old Pod, admission would
	// refuse every Pod anyway; wait for the count so the cause is the one
	// a real full namespace has.
	eventually(t, "the quota to count the old Pod", func(ctx context.Context) (bool, error) {
		q, err := env.kube.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		used := q.Status.Used[corev1.ResourcePods]
		return err == nil && used.Value() == 1, err
	})

	patch := []byte(`{"spec": {"deployment": {"name": "second"}}}`)
	if _, err := env.bars.BarcontrollerV1().Bars(ns).Patch(ctx, "mbb", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForDeployment(t, env, ns, "second", "the new Deployment", func(*appsv1.Deployment) bool { return true })

	// The old Deployment keeps serving while the new one cannot, through
	// four more syncs of the Bar (resyncs): the old code deleted it within
	// one sync. Counted in syncs, so that a slow machine cannot shorten
	// the window to none.
	syncs := env.syncs(t, ns, "mbb")
	eventually(t, "four more syncs of the renamed Bar with the old Deployment serving", func(ctx context.Context) (bool, error) {
		d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "first", metav1.GetOptions{})
		if err != nil || d.DeletionTimestamp != nil {
			t.Fatalf("the old Deployment went before the new one was available (err %v)", err)
		}
		if d.Status.AvailableReplicas != 1 {
			t.Fatalf("the old Deployment has %d available replicas, want 1: it must keep serving", d.Status.AvailableReplicas)
		}
		return env.syncs(t, ns, "mbb") >= syncs+4, nil
	})
	waitForCondition(t, env, ns, "mbb", barv1.ReasonRenaming, "first", "second")

	// The new Deployment passes its progress deadline: the Bar says so,
	// with a Warning, and still keeps the old one. The deadline is not a
	// field the Bar decides, so shortening it is no drift to repair.
	deadlinePatch := []byte(`{"spec": {"progressDeadlineSeconds": 1}}`)
	if _, err := env.kube.AppsV1().Deployments(ns).Patch(ctx, "second", types.MergePatchType, deadlinePatch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCondition(t, env, ns, "mbb", barv1.ReasonProgressDeadlineExceeded, "first", "second")
	waitForEvents(t, env, ns, "mbb", barv1.ReasonProgressDeadlineExceeded)
	if _, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "first", metav1.GetOptions{}); err != nil {
		t.Fatalf("the old Deployment went while the new one is stuck: %v", err)
	}
	if n := eventCount(t, env, ns, "mbb", eventDeploymentDeleted); n != 0 {
		t.Errorf("%d %s events while the new Deployment is unavailable", n, eventDeploymentDeleted)
	}

	// Room in the quota: the new Deployment becomes available, and only
	// then does the old one go.
	if err := env.kube.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForReady(t, env, ns, "mbb", 1)
	eventually(t, "the old Deployment to be deleted", func(ctx context.Context) (bool, error) {
		_, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "first", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if n := waitForEvents(t, env, ns, "mbb", eventDeploymentDeleted); n != 1 {
		t.Errorf("%d %s events, want 1", n, eventDeploymentDeleted)
	}
}

// waitForCondition waits until the Bar's Ready condition is False with
// reason, for its current generation, and its message names every one of
// names.
func waitForCondition(t *testing.T, env *integrationEnv, ns, name, reason string, names ...string) {
	t.Helper()
	var last *metav1.Condition
	eventually(t, "Ready=False reason "+reason, func(ctx context.Context) (bool, error) {
		bar, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady)
		return last != nil && last.Status == metav1.ConditionFalse && last.Reason == reason &&
			last.ObservedGeneration == bar.Generation, nil
	})
	for _, n := range names {
		if !strings.Contains(last.Message, n) {
			t.Errorf("Ready message %q does not name Deployment %s", last.Message, n)
		}
	}
}
