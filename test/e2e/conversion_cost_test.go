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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// TestConversionCostPerRequest pins what docs/api-versions.md ("When the
// webhook is called") says each request costs in ConversionReviews while
// both versions are served and v1 is stored. The webhook runs alone
// (--conversion-webhook-only), so nothing else reads or writes Bars, and
// its requests counter tells exactly what the API server asked for.
func TestConversionCostPerRequest(t *testing.T) {
	env, ns := setupOps(t)
	env.install(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	c := startController(t, "converter", kubeconfig,
		append([]string{"--conversion-webhook-only"}, localWebhook(t, env, installNamespace)...)...)
	c.waitProbe(t, "/readyz", 200)
	ctx := t.Context()
	v1 := env.bars.BarcontrollerV1().Bars(ns)
	alpha := env.bars.BarcontrollerV1alpha1().Bars(ns)

	reviews := func() float64 {
		v, _ := c.scrape(t).Value("bar_controller_conversion_webhook_requests_total", nil)
		return v
	}
	// cost runs op and returns the reviews it caused. The v1alpha1 watch
	// cache converts a write asynchronously, after the response: wait
	// until the count has been still for a while.
	cost := func(what string, op func(context.Context) error) int {
		t.Helper()
		before := reviews()
		if err := op(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		last, since := reviews(), time.Now()
		for time.Since(since) < time.Second {
			time.Sleep(100 * time.Millisecond)
			if n := reviews(); n != last {
				last, since = n, time.Now()
			}
		}
		return int(last - before)
	}

	for _, tc := range []struct {
		what string
		op   func(context.Context) error
		want int
	}{
		{"a create in v1 (into the v1alpha1 watch cache)", func(ctx context.Context) error {
			_, err := v1.Create(ctx, &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "in-v1"},
				Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "in-v1"}}}, metav1.CreateOptions{})
			return err
		}, 1},
		{"a create in v1alpha1 (request to v1, result back, watch cache)", func(ctx context.Context) error {
			_, err := alpha.Create(ctx, &barv1alpha1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "in-alpha"},
				Spec: barv1alpha1.BarSpec{DeploymentName: "in-alpha"}}, metav1.CreateOptions{})
			return err
		}, 3},
		{"a get in v1alpha1", func(ctx context.Context) error {
			_, err := alpha.Get(ctx, "in-v1", metav1.GetOptions{})
			return err
		}, 1},
		{"a list in v1alpha1 (from the watch cache)", func(ctx context.Context) error {
			_, err := alpha.List(ctx, metav1.ListOptions{})
			return err
		}, 0},
		{"a get in v1", func(ctx context.Context) error {
			_, err := v1.Get(ctx, "in-alpha", metav1.GetOptions{})
			return err
		}, 0},
		{"a merge patch in v1", func(ctx context.Context) error {
			_, err := v1.Patch(ctx, "in-v1", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{})
			return err
		}, 1},
		{"a status apply in v1 to a Bar with a v1alpha1 managedFields entry", func(ctx context.Context) error {
			_, err := v1.Patch(ctx, "in-alpha", types.ApplyPatchType,
				[]byte(`{"apiVersion":"barcontroller.dev/v1","kind":"Bar","metadata":{"name":"in-alpha"},"status":{"availableReplicas":0}}`),
				metav1.PatchOptions{FieldManager: "cost-test", Force: new(true)}, "status")
			return err
		}, 4},
	} {
		if got := cost(tc.what, tc.op); got != tc.want {
			t.Errorf("%s: %d ConversionReviews, want %d", tc.what, got, tc.want)
		}
	}
}
