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

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	barv1client "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/typed/barcontroller/v1"
	barv1alpha1client "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/typed/barcontroller/v1alpha1"
)

// policyName names the ValidatingAdmissionPolicy and its binding in
// artifacts/admission.
const policyName = "bars.barcontroller.dev"

const resourcesKey = barv1alpha1.ResourcesAnnotation

// TestResourcesAnnotation is issue 31 item 3 on a real API server, with the
// conversion webhook and what artifacts/ installs: the annotation that
// carries v1's spec.template.resources through v1alpha1 is refused as input
// in v1; a v1alpha1 write is judged as the v1 Bar it makes (v1's rule on
// claims included); the resources never change without metadata.generation;
// and a v1 Bar that carries the key from before the policy keeps its spec
// and the key through a v1alpha1 read and write.
func TestResourcesAnnotation(t *testing.T) {
	env, ns := setupOps(t)
	env.install(t)
	t.Cleanup(func() { _, _ = env.cluster.Kubectl(context.Background(), "apply", "--server-side", "-k", artifactsDir) })
	kubeconfig, _ := env.serviceAccountConfig(t)
	c := startController(t, "annotation", kubeconfig,
		append([]string{"--conversion-webhook-only"}, localWebhook(t, env, installNamespace)...)...)
	c.waitProbe(t, "/readyz", 200)
	waitPolicy(t, env, ns)

	quiet := rest.CopyConfig(env.cluster.Config)
	quiet.WarningHandler = rest.NoWarnings{} // v1alpha1's deprecation warning, on every answer
	alpha := clientset.NewForConfigOrDie(quiet).BarcontrollerV1alpha1().Bars(ns)
	v1 := env.bars.BarcontrollerV1().Bars(ns)
	ctx := t.Context()
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}

	t.Run("v1 refuses the key", func(t *testing.T) {
		_, err := v1.Create(ctx, v1Bar("v1-key", map[string]string{resourcesKey: `{"limits":{"cpu":"1"}}`}, corev1.ResourceRequirements{}), metav1.CreateOptions{})
		wantRefused(t, "a v1 create with the key", err, "reserved for barcontroller.dev/v1alpha1")

		if _, err := v1.Create(ctx, v1Bar("v1-plain", nil, corev1.ResourceRequirements{}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = v1.Patch(ctx, "v1-plain", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+resourcesKey+`":"{\"limits\":{\"cpu\":\"1\"}}"}}}`), metav1.PatchOptions{})
		wantRefused(t, "a v1 patch adding the key", err, "reserved for barcontroller.dev/v1alpha1")
	})

	t.Run("a v1alpha1 write is judged as the v1 Bar it makes", func(t *testing.T) {
		for _, tc := range []struct{ name, value, want string }{
			{"alpha-claims", `{"claims":[{"name":"gpu"}]}`, "claims are not supported"},
			{"alpha-garbage", `not json`, "must be spec.template.resources in JSON"},
			{"alpha-nothing", `{}`, "must be spec.template.resources in JSON"},
			{"alpha-unknown", `{"limits":{"cpu":"1"},"cpu":"1"}`, "must be spec.template.resources in JSON"},
			{"alpha-many-limits", `{"limits":{` + manyResources(33, 2) + `}}`, "at most 32 names in limits and in requests"},
			{"alpha-long-name", `{"requests":{` + manyResources(1, 318) + `}}`, "a resource name is at most 317 bytes"},
		} {
			_, err := alpha.Create(ctx, alphaBar(tc.name, tc.value), metav1.CreateOptions{})
			wantRefused(t, "a v1alpha1 create with "+tc.value, err, tc.want)
			if got, err := v1.Get(ctx, tc.name, metav1.GetOptions{}); err == nil {
				t.Errorf("stored in v1 from %s: annotations %v, resources %+v", tc.value, got.Annotations, got.Spec.Template.Resources)
			}
		}
		if _, err := alpha.Create(ctx, alphaBar("alpha-ok", `{"limits":{"cpu":"1"}}`), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a v1alpha1 create with resources: %v", err)
		}
		got, err := v1.Get(ctx, "alpha-ok", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, carried := got.Annotations[resourcesKey]; carried || !apiequality.Semantic.DeepEqual(got.Spec.Template.Resources, cpu("1")) {
			t.Errorf("a v1alpha1 create with resources, in v1: annotations %v, resources %+v; want no key and cpu limit 1", got.Annotations, got.Spec.Template.Resources)
		}
		// Claims added to a Bar that exists.
		alphaUpdate(t, alpha, "alpha-ok", func(b *barv1alpha1.Bar) {
			b.Annotations[resourcesKey] = `{"claims":[{"name":"gpu"}]}`
			b.Spec.Replicas = ptr.To[int32](2) // a spec change too, so only the claims are wrong
		}, "claims are not supported")
	})

	t.Run("the resources change only with the generation", func(t *testing.T) {
		created, err := v1.Create(ctx, v1Bar("gen", nil, cpu("1")), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The annotation alone: v1alpha1's spec is unchanged, so the API
		// server would keep the generation while v1's spec changes.
		alphaUpdate(t, alpha, "gen", func(b *barv1alpha1.Bar) { b.Annotations[resourcesKey] = `{"limits":{"cpu":"2"}}` }, "metadata.generation")
		checkV1(t, v1, "gen", created.Generation, cpu("1"), nil)
		alphaUpdate(t, alpha, "gen", func(b *barv1alpha1.Bar) { delete(b.Annotations, resourcesKey) }, "metadata.generation")
		checkV1(t, v1, "gen", created.Generation, cpu("1"), nil)
		// With a change of v1alpha1's spec the generation moves with them.
		alphaUpdate(t, alpha, "gen", func(b *barv1alpha1.Bar) {
			b.Annotations[resourcesKey] = `{"limits":{"cpu":"2"}}`
			b.Spec.Replicas = ptr.To[int32](3)
		}, "")
		checkV1(t, v1, "gen", created.Generation+1, cpu("2"), nil)
		// Read, change something else, write back: the resources stay.
		alphaUpdate(t, alpha, "gen", func(b *barv1alpha1.Bar) { b.Labels = map[string]string{"written-in": "v1alpha1"} }, "")
		checkV1(t, v1, "gen", created.Generation+1, cpu("2"), nil)
	})

	t.Run("a v1 Bar that carries the key from before the policy keeps it and its spec", func(t *testing.T) {
		// Such a Bar is written with the binding away, as before the
		// policy existed (with no policy installed, as before the fix,
		// there is nothing to remove). The binding comes back from the
		// copy read here: applying artifacts/ again would put the CRD's
		// webhook back on the Service that localWebhook replaced.
		bindings := env.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
		binding, err := bindings.Get(ctx, policyName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			binding = nil
		case err != nil:
			t.Fatal(err)
		default:
			if err := bindings.Delete(ctx, policyName, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		legacy := []struct {
			name      string
			value     string
			resources corev1.ResourceRequirements
		}{
			// Resources in JSON and none in the spec: before the fix, a
			// v1alpha1 read and write made them the Bar's resources.
			{"legacy-stale", `{"limits":{"cpu":"2"}}`, corev1.ResourceRequirements{}},
			// A value and resources: before, the resources overwrote it.
			{"legacy-both", `kept as it is`, cpu("1")},
		}
		for _, l := range legacy {
			eventually(t, "a v1 Bar with the key to be admitted once the binding is gone", func(ctx context.Context) (bool, error) {
				_, err := v1.Create(ctx, v1Bar(l.name, map[string]string{resourcesKey: l.value}, l.resources), metav1.CreateOptions{})
				return err == nil, ignoreInvalid(err)
			})
		}
		if binding != nil {
			binding.ObjectMeta = metav1.ObjectMeta{Name: binding.Name, Labels: binding.Labels, Annotations: binding.Annotations}
			if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitPolicy(t, env, ns)

		for _, l := range legacy {
			before, err := v1.Get(ctx, l.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			alphaUpdate(t, alpha, l.name, func(b *barv1alpha1.Bar) { b.Labels = map[string]string{"written-in": "v1alpha1"} }, "")
			checkV1(t, v1, l.name, before.Generation, l.resources, &l.value)
			// In v1 it may stay as it is, so that the Bar can be written
			// (and migrated: an empty patch), but not change.
			if _, err := v1.Patch(ctx, l.name, types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err != nil {
				t.Errorf("an empty patch in v1 of %s: %v", l.name, err)
			}
			_, err = v1.Patch(ctx, l.name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+resourcesKey+`":"changed"}}}`), metav1.PatchOptions{})
			wantRefused(t, "a v1 patch changing the key", err, "reserved for barcontroller.dev/v1alpha1")
			if _, err := v1.Patch(ctx, l.name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+resourcesKey+`":null}}}`), metav1.PatchOptions{}); err != nil {
				t.Errorf("a v1 patch removing the key from %s: %v", l.name, err)
			}
			checkV1(t, v1, l.name, before.Generation, l.resources, nil)
		}
	})
}

// waitPolicy waits until the API server enforces the policy artifacts/
// installed: a dry-run create that it refuses is refused. A policy and its
// binding take effect some milliseconds after they are written (the API
// server's informers). Without the policy it reports that and returns, so
// that the subtests show what a cluster without it does.
func waitPolicy(t *testing.T, env *opsEnv, ns string) {
	t.Helper()
	if _, err := env.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), policyName, metav1.GetOptions{}); err != nil {
		t.Errorf("the ValidatingAdmissionPolicy %s that artifacts/ ships: %v", policyName, err)
		return
	}
	probe := v1Bar("policy-probe", map[string]string{resourcesKey: "{}"}, corev1.ResourceRequirements{})
	eventually(t, "the policy to refuse a v1 Bar with the key", func(ctx context.Context) (bool, error) {
		_, err := env.bars.BarcontrollerV1().Bars(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err), nil
	})
}

func v1Bar(name string, annotations map[string]string, resources corev1.ResourceRequirements) *barv1.Bar {
	return &barv1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: name}, Replicas: ptr.To[int32](1),
			Template: barv1.BarPodTemplate{Resources: resources}},
	}
}

func alphaBar(name, value string) *barv1alpha1.Bar {
	return &barv1alpha1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{resourcesKey: value}},
		Spec:       barv1alpha1.BarSpec{DeploymentName: name},
	}
}

// alphaUpdate reads the Bar in v1alpha1, changes it and writes it back; the
// write must succeed (refusal "") or be refused with a message containing
// refusal.
func alphaUpdate(t *testing.T, alpha barv1alpha1client.BarInterface, name string, change func(*barv1alpha1.Bar), refusal string) {
	t.Helper()
	b, err := alpha.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	change(b)
	_, err = alpha.Update(t.Context(), b, metav1.UpdateOptions{})
	if refusal == "" {
		if err != nil {
			t.Errorf("v1alpha1 update of %s: %v", name, err)
		}
		return
	}
	wantRefused(t, "a v1alpha1 update of "+name, err, refusal)
}

// checkV1 reads the Bar in v1 and compares it with what it must be.
func checkV1(t *testing.T, v1 barv1client.BarInterface, name string, generation int64, resources corev1.ResourceRequirements, value *string) {
	t.Helper()
	got, err := v1.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec.Template.Resources, resources) {
		t.Errorf("Bar %s in v1: resources %+v, want %+v (generation %d)", name, got.Spec.Template.Resources, resources, got.Generation)
	}
	if got.Generation != generation {
		t.Errorf("Bar %s in v1: generation %d, want %d", name, got.Generation, generation)
	}
	if v, ok := got.Annotations[resourcesKey]; ok != (value != nil) || value != nil && v != *value {
		t.Errorf("Bar %s in v1: annotations %v, want %s %v", name, got.Annotations, resourcesKey, ptr.Deref(value, "absent"))
	}
}

// wantRefused fails unless err is the API server's refusal as invalid,
// with a message containing want.
func wantRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: admitted, want it refused (%q)", what, want)
	case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want):
		t.Errorf("%s: %v, want Invalid with %q", what, err, want)
	default:
		t.Logf("%s: %v", what, err)
	}
}

// ignoreInvalid passes a refusal as invalid on as no error, to be retried.
func ignoreInvalid(err error) error {
	if apierrors.IsInvalid(err) {
		return nil
	}
	return err
}

// manyResources is n entries of a resource list, each named by nameBytes
// bytes, as JSON members.
func manyResources(n, nameBytes int) string {
	entries := make([]string, n)
	for i := range entries {
		name := fmt.Sprintf("r%d", i)
		entries[i] = fmt.Sprintf("%q:%q", name+strings.Repeat("x", max(0, nameBytes-len(name))), "1")
	}
	return strings.Join(entries, ",")
}
