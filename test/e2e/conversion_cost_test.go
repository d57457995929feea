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
	"reflect"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

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
	// The v1alpha1 watch cache converts a write after the response,
	// asynchronously. A v1alpha1 watch is served from that cache, so it
	// delivers the write only once it was converted: cost waits for the
	// write's resourceVersion on such a watch, which a slow machine cannot
	// reorder, rather than for the count to stay still a while. The webhook
	// counts a review before its answer ends, and the API server reads the
	// whole answer before it goes on, so the count is final by then.
	seen := watchAlphaVersions(t, env, ns)
	// cost runs op, which returns the resourceVersion it wrote ("" for a
	// read), and returns the reviews it caused.
	cost := func(what string, op func(context.Context) (string, error)) int {
		t.Helper()
		before := reviews()
		rv, err := op(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if rv != "" {
			seen.wait(t, what, rv)
		}
		return int(reviews() - before)
	}

	for _, tc := range []struct {
		what string
		op   func(context.Context) (string, error)
		want int
	}{
		{"a create in v1 (into the v1alpha1 watch cache)", func(ctx context.Context) (string, error) {
			b, err := v1.Create(ctx, &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "in-v1"},
				Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "in-v1"}}}, metav1.CreateOptions{})
			return rvOf(b), err
		}, 1},
		{"a create in v1alpha1 (to v1 for the admission policy, request to v1, result back, watch cache)", func(ctx context.Context) (string, error) {
			b, err := alpha.Create(ctx, &barv1alpha1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "in-alpha"},
				Spec: barv1alpha1.BarSpec{DeploymentName: "in-alpha"}}, metav1.CreateOptions{})
			return rvOf(b), err
		}, 4},
		{"a get in v1alpha1", func(ctx context.Context) (string, error) {
			_, err := alpha.Get(ctx, "in-v1", metav1.GetOptions{})
			return "", err
		}, 1},
		{"a list in v1alpha1 (from the watch cache)", func(ctx context.Context) (string, error) {
			_, err := alpha.List(ctx, metav1.ListOptions{})
			return "", err
		}, 0},
		{"a get in v1", func(ctx context.Context) (string, error) {
			_, err := v1.Get(ctx, "in-alpha", metav1.GetOptions{})
			return "", err
		}, 0},
		{"a merge patch in v1", func(ctx context.Context) (string, error) {
			b, err := v1.Patch(ctx, "in-v1", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{})
			return rvOf(b), err
		}, 1},
		{"a status apply in v1 to a Bar with a v1alpha1 managedFields entry", func(ctx context.Context) (string, error) {
			b, err := v1.Patch(ctx, "in-alpha", types.ApplyPatchType,
				[]byte(`{"apiVersion":"barcontroller.dev/v1","kind":"Bar","metadata":{"name":"in-alpha"},"status":{"availableReplicas":0}}`),
				metav1.PatchOptions{FieldManager: "cost-test", Force: new(true)}, "status")
			return rvOf(b), err
		}, 4},
	} {
		if got := cost(tc.what, tc.op); got != tc.want {
			t.Errorf("%s: %d ConversionReviews, want %d", tc.what, got, tc.want)
		}
	}
}

// rvOf is the resourceVersion of what a write returned.
func rvOf(o metav1.Object) string {
	if o == nil || reflect.ValueOf(o).IsNil() {
		return ""
	}
	return o.GetResourceVersion()
}

// alphaVersions is the resourceVersions a v1alpha1 watch of Bars has
// delivered.
type alphaVersions struct {
	mu    sync.Mutex
	rvs   map[string]bool
	ended error
}

// watchAlphaVersions watches the Bars of ns in v1alpha1 from now on,
// served from the v1alpha1 watch cache, which converts nothing. It starts
// wherever that cache is (resourceVersion "0"): a resourceVersion read
// elsewhere, as from a list in v1, can be older than the cache's own
// start, and the watch then ends at once with "too old resource version"
// (CI, once).
func watchAlphaVersions(t *testing.T, env *opsEnv, ns string) *alphaVersions {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := env.bars.BarcontrollerV1alpha1().Bars(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	seen := &alphaVersions{rvs: map[string]bool{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			seen.mu.Lock()
			if o, ok := ev.Object.(metav1.Object); ok && ev.Type != watch.Error {
				seen.rvs[o.GetResourceVersion()] = true
			} else {
				seen.ended = fmt.Errorf("the v1alpha1 watch ended: %v", ev.Object)
			}
			seen.mu.Unlock()
		}
	}()
	return seen
}

// wait waits until the watch has delivered resourceVersion rv.
func (s *alphaVersions) wait(t *testing.T, what, rv string) {
	t.Helper()
	eventually(t, fmt.Sprintf("the v1alpha1 watch to deliver %s (resourceVersion %s)", what, rv), func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.rvs[rv], s.ended
	})
}
