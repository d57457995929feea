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
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// v1's spec.template.resources exist for namespaces like this one: a
// ResourceQuota on cpu and memory admits only Pods that declare them, so a
// Bar without resources gets a Deployment whose Pods are all refused. With
// resources the same Bar runs; changing them rolls the Deployment; removing
// them takes them off the Deployment again, since they were the
// controller's.
func TestResourcesLetBarsRunUnderAQuota(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := context.Background()
	quota, err := env.kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceRequestsCPU: resource.MustParse("1"), corev1.ResourceRequestsMemory: resource.MustParse("1Gi"),
			corev1.ResourceLimitsMemory: resource.MustParse("2Gi"),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Admission enforces a quota only once the quota controller has
	// filled in its status.
	eventually(t, "the quota to be counted", func(ctx context.Context) (bool, error) {
		q, err := env.kube.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, err
	})

	createBar(t, env, ns, "web", "web", 2)
	waitForDeployment(t, env, ns, "web", "the Deployment to report refused Pods", func(d *appsv1.Deployment) bool {
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})

	patch := []byte(`{"spec": {"template": {"resources": {"requests": {"cpu": "0.1", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}}}`)
	if _, err := env.bars.BarcontrollerV1().Bars(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForReady(t, env, ns, "web", 2)
	waitForDeployment(t, env, ns, "web", "the Bar's resources", func(d *appsv1.Deployment) bool {
		r := d.Spec.Template.Spec.Containers[0].Resources
		return r.Requests.Cpu().String() == "100m" && r.Requests.Memory().String() == "64Mi" && r.Limits.Memory().String() == "128Mi"
	})
	// "0.1" is stored as "100m": the canonical form must not look like
	// drift, or every resync would apply again. The audit log says who
	// wrote: kube-controller-manager may still update the Deployment's
	// status after the Bar is ready (its Progressing condition's reason),
	// so the resourceVersion alone does not say it was the controller.
	writes := len(env.writes(t, ns))
	before := env.syncs(t, ns, "web")
	eventually(t, "three more syncs", func(context.Context) (bool, error) {
		return env.syncs(t, ns, "web") >= before+3, nil
	})
	if w := env.writes(t, ns)[writes:]; len(w) > 0 {
		t.Errorf("the controller wrote after the Deployment matched: %v", w)
	}

	// Taken off the Bar, they leave the Deployment: the Pods are refused
	// again, as the Bar now asks.
	remove := []byte(`{"spec": {"template": {"resources": null}}}`)
	if _, err := env.bars.BarcontrollerV1().Bars(ns).Patch(ctx, "web", types.MergePatchType, remove, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForDeployment(t, env, ns, "web", "no resources", func(d *appsv1.Deployment) bool {
		r := d.Spec.Template.Spec.Containers[0].Resources
		return len(r.Requests) == 0 && len(r.Limits) == 0
	})
}
