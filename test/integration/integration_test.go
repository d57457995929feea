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
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// These tests run against a real control plane; see env_test.go.

// What users see of the controller, and so what the tests check: its
// field manager, the label it puts on what it creates, and its Events'
// reasons (controller.go, deployment.go).
const (
	fieldManager            = "bar-controller"
	barLabel                = "barcontroller.dev/bar"
	eventDeploymentCreated  = "DeploymentCreated"
	eventDeploymentDeleted  = "DeploymentDeleted"
	eventDeploymentNotOwned = barv1.ReasonDeploymentNotOwned
)

func TestAdmissionRejectsBadBars(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	longName := strings.Repeat("a", 243)
	tests := []struct {
		name, spec string
		wantInMsg  []string
	}{
		{"no spec", ``, []string{"spec: Required value"}},
		{"no deployment", `"spec": {"replicas": 1}`, []string{"spec.deployment: Required value"}},
		{"deployment name not a DNS name", `"spec": {"deployment": {"name": "Web_1"}}`,
			[]string{"spec.deployment.name", "lowercase RFC 1123 subdomain"}},
		{"deployment name too long", `"spec": {"deployment": {"name": "` + longName + `"}}`,
			[]string{"spec.deployment.name", "242"}},
		{"negative replicas", `"spec": {"deployment": {"name": "web"}, "replicas": -1}`,
			[]string{"spec.replicas", "greater than or equal to 0"}},
		{"too many replicas", `"spec": {"deployment": {"name": "web"}, "replicas": 1001}`,
			[]string{"spec.replicas", "less than or equal to 1000"}},
		{"replicas of the wrong type", `"spec": {"deployment": {"name": "web"}, "replicas": "three"}`,
			[]string{"spec.replicas", "integer"}},
		{"image with a space", `"spec": {"deployment": {"name": "web"}, "template": {"image": "nginx 1.28"}}`,
			[]string{"spec.template.image", "container image reference"}},
		{"untagged image", `"spec": {"deployment": {"name": "web"}, "template": {"image": "nginx"}}`,
			[]string{"spec.template.image", "must name a tag or digest"}},
		{"latest image", `"spec": {"deployment": {"name": "web"}, "template": {"image": "nginx:latest"}}`,
			[]string{"spec.template.image", "must not use the ':latest' tag"}},
		{"empty image", `"spec": {"deployment": {"name": "web"}, "template": {"image": ""}}`,
			[]string{"spec.template.image", "at least 1 chars long"}},
		{"resource claims", `"spec": {"deployment": {"name": "web"}, "template": {"resources": {"claims": [{"name": "gpu"}]}}}`,
			[]string{"spec.template.resources", "claims are not supported"}},
		{"a quantity that is none", `"spec": {"deployment": {"name": "web"}, "template": {"resources": {"limits": {"cpu": "lots"}}}}`,
			[]string{"spec.template.resources.limits.cpu"}},
		// Parsing and writing a quantity costs by its digits and its
		// exponent (barcontroller.BoundedQuantity).
		{"a quantity longer than 64 bytes", `"spec": {"deployment": {"name": "web"}, "template": {"resources": {"requests": {"cpu": "` + strings.Repeat("1", 65) + `"}}}}`,
			[]string{"spec.template.resources.requests.cpu", "64"}},
		{"a quantity with an exponent of more than two digits", `"spec": {"deployment": {"name": "web"}, "template": {"resources": {"limits": {"memory": "1111111111111111111e30000000"}}}}`,
			[]string{"spec.template.resources.limits.memory", "should match"}},
		// Each entry of limits and requests weighs in the webhook's budget,
		// and converted to v1alpha1 they are an annotation, which the API
		// server bounds (barcontroller.MaxResources).
		{"more than 32 limits", `"spec": {"deployment": {"name": "web"}, "template": {"resources": {"limits": {` + resourceList(33, 2) + `}}}}`,
			[]string{"spec.template.resources.limits", "32"}},
		{"a resource name of more than 317 bytes", `"spec": {"deployment": {"name": "web"}, "template": {"resources": {"requests": {` + resourceList(1, 318) + `}}}}`,
			[]string{"spec.template.resources.requests", "at most 317 bytes"}},
		{"unknown field", `"spec": {"deployment": {"name": "web"}, "replicaz": 2}`,
			[]string{`unknown field "spec.replicaz"`}},
		{"a v1alpha1 field in v1", `"spec": {"deployment": {"name": "web"}, "deploymentName": "web"}`,
			[]string{`unknown field "spec.deploymentName"`}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"apiVersion": "barcontroller.dev/v1", "kind": "Bar", "metadata": {"name": "bad-%d"}`, i)
			if tc.spec != "" {
				body += ", " + tc.spec
			}
			body += "}"
			// Strict field validation is what kubectl uses by default.
			err := env.bars.BarcontrollerV1().RESTClient().Post().Namespace(ns).Resource("bars").
				Param("fieldValidation", "Strict").Body([]byte(body)).Do(context.Background()).Error()
			if err == nil {
				t.Fatalf("the API server accepted %s", body)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Errorf("got %v, want an Invalid or BadRequest error", err)
			}
			for _, want := range tc.wantInMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		bar, err := env.bars.BarcontrollerV1().Bars(ns).Create(context.Background(), &barv1.Bar{
			ObjectMeta: metav1.ObjectMeta{Name: "minimal"},
			Spec:       barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "minimal"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if bar.Spec.Replicas == nil || *bar.Spec.Replicas != 1 || bar.Spec.Template.Image != barv1.DefaultImage {
			t.Errorf("defaults: replicas %v image %q, want 1 and %q", bar.Spec.Replicas, bar.Spec.Template.Image, barv1.DefaultImage)
		}
	})
}

// resourceList is n entries of a resource list, each named by nameBytes
// bytes, as JSON members.
func resourceList(n, nameBytes int) string {
	entries := make([]string, n)
	for i := range entries {
		name := fmt.Sprintf("r%d", i)
		entries[i] = fmt.Sprintf("%q: \"1\"", name+strings.Repeat("x", max(0, nameBytes-len(name))))
	}
	return strings.Join(entries, ", ")
}

func TestCreateConvergesAndScales(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	bar := createBar(t, env, ns, "web", "web-deploy", 2)
	waitForReady(t, env, ns, "web", 2)

	d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "web-deploy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != bar.UID || ref.Kind != "Bar" || ref.APIVersion != "barcontroller.dev/v1" ||
		!ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference %+v, want the Bar, blocking owner deletion", ref)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != barv1.DefaultImage ||
		d.Spec.Selector.MatchLabels[barLabel] != "web" {
		t.Errorf("Deployment spec: replicas %d, image %s, selector %v", *d.Spec.Replicas,
			d.Spec.Template.Spec.Containers[0].Image, d.Spec.Selector.MatchLabels)
	}

	// kubectl scale goes through the scale subresource.
	if _, err := env.cluster.Kubectl(ctx, "-n", ns, "scale", "bar/web", "--replicas=3"); err != nil {
		t.Fatal(err)
	}
	waitForReady(t, env, ns, "web", 3)
	if d, err = env.kube.AppsV1().Deployments(ns).Get(ctx, "web-deploy", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 3 {
		t.Errorf("after kubectl scale: Deployment %v, err %v", d.Spec.Replicas, err)
	}
	out, err := env.cluster.Kubectl(ctx, "-n", ns, "get", "bar/web", "-o", "jsonpath={.status.availableReplicas}")
	if err != nil || out != "3" {
		t.Errorf("kubectl get: availableReplicas %q (%v)", out, err)
	}

	// One creation, announced once: the stale-cache guard keeps a quick
	// second sync from applying and announcing the Deployment again.
	if n := waitForEvents(t, env, ns, "web", eventDeploymentCreated); n != 1 {
		t.Errorf("%d %s events, want 1", n, eventDeploymentCreated)
	}
}

func TestDriftIsRepairedAndOthersFieldsSurvive(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	createBar(t, env, ns, "drift", "drift", 2)
	waitForReady(t, env, ns, "drift", 2)

	edit := func(mutate func(*appsv1.Deployment)) {
		t.Helper()
		// The Deployment controller writes status all the while: a person
		// editing would retry on a conflict, and so does this.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "drift", metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(d)
			_, err = env.kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{FieldManager: "someone-else"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	edit(func(d *appsv1.Deployment) {
		d.Spec.Replicas = ptr.To[int32](5)
		d.Annotations["example.com/note"] = "added by hand"
	})
	waitForDeployment(t, env, ns, "drift", "replicas restored", func(d *appsv1.Deployment) bool { return *d.Spec.Replicas == 2 })

	edit(func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0.0" })
	d := waitForDeployment(t, env, ns, "drift", "image restored", func(d *appsv1.Deployment) bool {
		return d.Spec.Template.Spec.Containers[0].Image == barv1.DefaultImage
	})
	if d.Annotations["example.com/note"] != "added by hand" {
		t.Errorf("an annotation the controller does not own was lost: %v", d.Annotations)
	}
	// Without its managed-by label the Deployment leaves the controller's
	// label-selected cache; the metadata cache still knows it is the Bar's.
	edit(func(d *appsv1.Deployment) { delete(d.Labels, "app.kubernetes.io/managed-by") })
	waitForDeployment(t, env, ns, "drift", "managed-by label restored", func(d *appsv1.Deployment) bool {
		return d.Labels["app.kubernetes.io/managed-by"] == "bar-controller"
	})
	waitForReady(t, env, ns, "drift", 2)
}

func TestDeploymentNameChangeReplacesDeployment(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	createBar(t, env, ns, "rename", "first", 1)
	waitForReady(t, env, ns, "rename", 1)

	patch := []byte(`{"spec": {"deployment": {"name": "second"}}}`)
	if _, err := env.bars.BarcontrollerV1().Bars(ns).Patch(ctx, "rename", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old Deployment to be deleted", func(ctx context.Context) (bool, error) {
		_, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "first", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	bar := waitForReady(t, env, ns, "rename", 1)
	d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "second", metav1.GetOptions{})
	if err != nil || !metav1.IsControlledBy(d, bar) {
		t.Errorf("new Deployment: %v, controlled by the Bar: %v", err, err == nil && metav1.IsControlledBy(d, bar))
	}
	if n := waitForEvents(t, env, ns, "rename", eventDeploymentDeleted); n != 1 {
		t.Errorf("%d %s events, want 1", n, eventDeploymentDeleted)
	}
}

func TestForeignDeploymentIsLeftAlone(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	foreign := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Labels: map[string]string{"app": "theirs"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "theirs", Image: "busybox:1.36"}}},
			},
		},
	}
	if _, err := env.kube.AppsV1().Deployments(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createBar(t, env, ns, "clash", "taken", 2)
	eventually(t, "Ready=False DeploymentNotOwned", func(ctx context.Context) (bool, error) {
		bar, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "clash", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == barv1.ReasonDeploymentNotOwned, nil
	})
	waitForEvents(t, env, ns, "clash", eventDeploymentNotOwned)

	// No hot loop: the blocked Bar is synced again and again (every
	// resync), and none of four syncs writes anything.
	if w := env.writesOverSyncs(t, ns, "clash", 4); len(w) > 0 {
		t.Errorf("the controller kept writing while blocked: %v", w)
	}
	if n := eventCount(t, env, ns, "clash", eventDeploymentNotOwned); n != 1 {
		t.Errorf("%d Warning %s events, want 1", n, eventDeploymentNotOwned)
	}
	d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "taken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.OwnerReferences) != 0 || *d.Spec.Replicas != 1 || d.Spec.Template.Spec.Containers[0].Image != "busybox:1.36" ||
		d.Labels[barLabel] != "" {
		t.Errorf("the foreign Deployment was modified: owners %v, replicas %d, image %s, labels %v",
			d.OwnerReferences, *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image, d.Labels)
	}
	for _, m := range d.ManagedFields {
		if m.Manager == fieldManager {
			t.Errorf("bar-controller manages fields of the foreign Deployment: %+v", m)
		}
	}

	// Once the other Deployment is gone, the Bar takes the name: the
	// Deployment's delete event finds the Bar through the name index.
	if err := env.kube.AppsV1().Deployments(ns).Delete(ctx, "taken", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForReady(t, env, ns, "clash", 2)
}

func TestNoOpResyncWritesNothing(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	createBar(t, env, ns, "quiet", "quiet", 2)
	bar := waitForReady(t, env, ns, "quiet", 2)
	d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "quiet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Every resync syncs every Bar: none of this one's next three syncs
	// may write.
	if before := env.writes(t, ns); len(before) < 2 {
		// The Deployment and the status, at least: if the audit log does
		// not show those, it would not show a stray write either.
		t.Fatalf("the audit log shows %d writes by the controller before the window: %v", len(before), before)
	}
	if w := env.writesOverSyncs(t, ns, "quiet", 3); len(w) > 0 {
		t.Errorf("a converged Bar caused writes: %v", w)
	}
	bar2, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "quiet", metav1.GetOptions{})
	if err != nil || bar2.ResourceVersion != bar.ResourceVersion {
		t.Errorf("Bar resourceVersion moved from %s to %s (%v)", bar.ResourceVersion, bar2.ResourceVersion, err)
	}
	d2, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "quiet", metav1.GetOptions{})
	if err != nil || d2.ResourceVersion != d.ResourceVersion {
		t.Errorf("Deployment resourceVersion moved from %s to %s (%v)", d.ResourceVersion, d2.ResourceVersion, err)
	}
}

func TestGarbageCollectorRemovesDeploymentOfDeletedBar(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	bar := createBar(t, env, ns, "doomed", "doomed", 1)
	d := waitForDeployment(t, env, ns, "doomed", "the Deployment", func(*appsv1.Deployment) bool { return true })
	if !metav1.IsControlledBy(d, bar) {
		t.Fatalf("Deployment owners %v do not include the Bar", d.OwnerReferences)
	}
	if err := env.bars.BarcontrollerV1().Bars(ns).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the garbage collector to delete the Deployment", func(ctx context.Context) (bool, error) {
		_, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// --- helpers ---

func createBar(t *testing.T, env *integrationEnv, ns, name, deploymentName string, replicas int32) *barv1.Bar {
	t.Helper()
	bar, err := env.bars.BarcontrollerV1().Bars(ns).Create(context.Background(), &barv1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       barv1.BarSpec{Deployment: barv1.BarDeployment{Name: deploymentName}, Replicas: ptr.To(replicas)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return bar
}

// waitForReady waits until the Bar's status is current and says Ready with
// the given number of available replicas.
func waitForReady(t *testing.T, env *integrationEnv, ns, name string, available int32) *barv1.Bar {
	t.Helper()
	var bar *barv1.Bar
	eventually(t, fmt.Sprintf("Bar %s/%s Ready with %d available", ns, name, available), func(ctx context.Context) (bool, error) {
		var err error
		if bar, err = env.bars.BarcontrollerV1().Bars(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady)
		return bar.Status.ObservedGeneration == bar.Generation && bar.Status.AvailableReplicas == available &&
			c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == bar.Generation, nil
	})
	return bar
}

func waitForDeployment(t *testing.T, env *integrationEnv, ns, name, what string, cond func(*appsv1.Deployment) bool) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	eventually(t, what, func(ctx context.Context) (bool, error) {
		var err error
		d, err = env.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cond(d), err
	})
	return d
}

// waitForEvents waits until the event recorder, which writes in the
// background, has written at least one such event, and returns the count.
func waitForEvents(t *testing.T, env *integrationEnv, ns, bar, reason string) int {
	t.Helper()
	var n int
	eventually(t, "a "+reason+" event", func(context.Context) (bool, error) {
		n = eventCount(t, env, ns, bar, reason)
		return n > 0, nil
	})
	return n
}

// eventCount adds up the events with a reason about a Bar, counting the
// repeats the event recorder folds into one object.
func eventCount(t *testing.T, env *integrationEnv, ns, bar, reason string) int {
	t.Helper()
	n, err := localcluster.EventCount(context.Background(), env.kube, ns, "Bar", bar, reason)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
