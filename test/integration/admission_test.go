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
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

const mirror = "mirror.example/"

// mirrorPolicy is what many real clusters run: every Deployment's images
// are pulled through a registry mirror, rewritten by a
// MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since
// Kubernetes 1.36) as the Deployment is written. Bound to one namespace,
// so that it touches only this test's Deployments.
const mirrorPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: %[1]s
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  matchConditions:
  - name: not-mirrored-yet
    expression: "object.spec.template.spec.containers.exists(c, !c.image.startsWith('%[2]s'))"
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{
          containers: object.spec.template.spec.containers.filter(c, !c.image.startsWith('%[2]s')).map(c,
            Object.spec.template.spec.containers{name: c.name, image: '%[2]s' + c.image})}}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: %[1]s
spec:
  policyName: %[1]s
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: %[1]s
`

// Admission rewrites the image the controller applies. The controller must
// accept what admission made of its own apply, write nothing while nothing
// changes (resyncs, a restart), and still put back what another client
// changes. It restarts the shared controller, so it runs alone: it does not
// call t.Parallel, and Go runs the parallel tests after it.
func TestMutatingAdmissionDoesNotStartAFight(t *testing.T) {
	env, ns := setupIntegration(t)
	ctx := context.Background()
	installMirrorPolicy(t, env, ns)

	createBar(t, env, ns, "mirrored", "mirrored", 2)
	waitForReady(t, env, ns, "mirrored", 2)
	waitForDeployment(t, env, ns, "mirrored", "the Deployment with the mirrored image", func(d *appsv1.Deployment) bool {
		return imageOf(d) == mirror+"nginx:1.28.0"
	})

	quiet := func(when string) {
		t.Helper()
		if w := env.writesOverSyncs(t, ns, "mirrored", 3); len(w) > 0 {
			t.Errorf("%s: the controller wrote %d times over three syncs of the Bar: %v", when, len(w), w)
		}
	}
	quiet("after convergence")

	if err := env.restart(); err != nil {
		t.Fatalf("restarting the controller: %v", err)
	}
	quiet("after a restart")

	// Real drift is still repaired: another client's edits to fields the
	// Bar decides move those fields to that client, and are put back.
	updates := eventCount(t, env, ns, "mirrored", "DeploymentUpdated")
	if _, err := env.cluster.Kubectl(ctx, "-n", ns, "set", "image", "deployment/mirrored", "app=nginx:1.29.0"); err != nil {
		t.Fatal(err)
	}
	waitForDeployment(t, env, ns, "mirrored", "the image to be put back", func(d *appsv1.Deployment) bool {
		return imageOf(d) == mirror+"nginx:1.28.0" && ownerOfImage(d) == fieldManager
	})
	if _, err := env.cluster.Kubectl(ctx, "-n", ns, "scale", "deployment/mirrored", "--replicas=5"); err != nil {
		t.Fatal(err)
	}
	waitForDeployment(t, env, ns, "mirrored", "the replicas to be put back", func(d *appsv1.Deployment) bool {
		return ptr.Deref(d.Spec.Replicas, 0) == 2
	})
	eventually(t, "a DeploymentUpdated event per repair", func(context.Context) (bool, error) {
		return eventCount(t, env, ns, "mirrored", "DeploymentUpdated") >= updates+2, nil
	})
	// The scale to 5 started Pods that the repair then scaled away: wait
	// for the Deployment controller to settle, or the Bar's status follows
	// it (and is written) inside the quiet window.
	waitForDeployment(t, env, ns, "mirrored", "the Deployment to settle at 2 replicas", func(d *appsv1.Deployment) bool {
		s := d.Status
		return s.ObservedGeneration == d.Generation && s.Replicas == 2 && s.UpdatedReplicas == 2 &&
			s.AvailableReplicas == 2 && ptr.Deref(s.TerminatingReplicas, 0) == 0
	})
	waitForReady(t, env, ns, "mirrored", 2)
	// The Bar's status follows the Deployment through that scale (not
	// ready, ready again), and the controller may see the last of it just
	// after the test does. Wait for a sync of the Bar that writes nothing:
	// in a fight every sync writes, so this times out on one.
	eventually(t, "a sync of the Bar that writes nothing after the repairs", func(context.Context) (bool, error) {
		return len(env.writesOverSyncs(t, ns, "mirrored", 1)) == 0, nil
	})
	quiet("after the repairs")
	if n := eventCount(t, env, ns, "mirrored", "DeploymentUpdated"); n != updates+2 {
		t.Errorf("%d DeploymentUpdated events after two repairs, want %d: one per apply that changed the Deployment", n, updates+2)
	}
}

// installMirrorPolicy installs the policy for namespace ns and waits until
// the API server enforces it (policies load asynchronously).
func installMirrorPolicy(t *testing.T, env *integrationEnv, ns string) {
	t.Helper()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(mirrorPolicy, ns, mirror)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := env.cluster.Kubectl(ctx, "apply", "--server-side", "-f", file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.cluster.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file)
	})
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"probe": "x"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"probe": "x"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.28.0"}}},
			},
		},
	}
	eventually(t, "the admission policy to rewrite a dry-run Deployment", func(ctx context.Context) (bool, error) {
		d, err := env.kube.AppsV1().Deployments(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && strings.HasPrefix(imageOf(d), mirror), nil
	})
}

func imageOf(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "app" {
			return c.Image
		}
	}
	return ""
}

// ownerOfImage names the managers whose managedFields hold the app
// container's image.
func ownerOfImage(d *appsv1.Deployment) string {
	image := fieldpath.MakePathOrDie("spec", "template", "spec", "containers", fieldpath.KeyByFields("name", "app"), "image")
	var owners []string
	for _, e := range d.ManagedFields {
		set := &fieldpath.Set{}
		if e.FieldsV1 != nil && set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)) == nil && set.Has(image) {
			owners = append(owners, e.Manager)
		}
	}
	return strings.Join(owners, ",")
}
