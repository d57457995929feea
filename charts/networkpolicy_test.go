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

package charts

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const networkPolicyKey = "NetworkPolicy/bar-controller/bar-controller-ingress"

// networkPolicy renders the chart with set and returns its NetworkPolicy,
// or nil if it renders none.
func networkPolicy(t *testing.T, helm string, set ...string) *networkingv1.NetworkPolicy {
	t.Helper()
	rendered, err := template(t, helm, set...)
	if err != nil {
		t.Fatal(err)
	}
	obj, ok := objects(t, rendered)[networkPolicyKey]
	if !ok {
		return nil
	}
	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, &np, true); err != nil {
		t.Fatalf("%s: %v", networkPolicyKey, err)
	}
	return &np
}

// TestChartNetworkPolicyMatchesKustomize: with networkPolicy.enabled and
// the default values, the chart's NetworkPolicy is artifacts/networkpolicy's,
// field for field (test/e2e's TestNetworkPolicyAdmits reads what that one
// admits); with the defaults, the chart renders none.
func TestChartNetworkPolicyMatchesKustomize(t *testing.T) {
	helm, kubectl := tools(t)
	rendered, err := template(t, helm, "networkPolicy.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	kustomized, err := run(t, kubectl, "kustomize", "../artifacts/networkpolicy")
	if err != nil {
		t.Fatal(err)
	}
	want, ok := objects(t, kustomized)[networkPolicyKey]
	if !ok {
		t.Fatalf("kubectl kustomize artifacts/networkpolicy has no %s", networkPolicyKey)
	}
	got := objects(t, rendered)
	withoutHelmLabels(t, got)
	if diff := cmp.Diff(want, got[networkPolicyKey]); diff != "" {
		t.Errorf("%s: helm template differs from kubectl kustomize artifacts/networkpolicy (-kustomize +helm):\n%s", networkPolicyKey, diff)
	}
	if np := networkPolicy(t, helm); np != nil {
		t.Errorf("%s rendered with the default values: it must be opt-in", networkPolicyKey)
	}
}

// TestChartNetworkPolicyValues: the monitoring namespace and Prometheus's
// labels are values, and the webhook rule has a block for each family
// podCIDRs names and none for a family it does not (an IPv4-only cluster).
// Without the webhook there is no webhook rule, and the policy selects
// the Pods by the chart's label; without metrics, no metrics rule.
func TestChartNetworkPolicyValues(t *testing.T) {
	helm, _ := tools(t)
	np := networkPolicy(t, helm, "networkPolicy.enabled=true", "networkPolicy.podCIDRs={10.42.0.0/16}",
		"networkPolicy.monitoringNamespace=observability",
		`networkPolicy.prometheusPodLabels.app\.kubernetes\.io/name=null`, "networkPolicy.prometheusPodLabels.prometheus=main")
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("%d ingress rules, want the webhook's and the metrics'", len(np.Spec.Ingress))
	}
	from := np.Spec.Ingress[0].From
	if len(from) != 1 || from[0].IPBlock == nil || from[0].IPBlock.CIDR != "0.0.0.0/0" || !cmp.Equal(from[0].IPBlock.Except, []string{"10.42.0.0/16"}) {
		t.Errorf("webhook rule from %+v, want 0.0.0.0/0 but 10.42.0.0/16 alone", from)
	}
	from = np.Spec.Ingress[1].From
	if len(from) != 1 || from[0].NamespaceSelector == nil || from[0].PodSelector == nil ||
		!cmp.Equal(from[0].NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": "observability"}) ||
		!cmp.Equal(from[0].PodSelector.MatchLabels, map[string]string{"prometheus": "main"}) {
		t.Errorf("metrics rule from %+v, want the namespace observability and the Pods labelled prometheus=main there, in one peer", from)
	}

	np = networkPolicy(t, helm, "networkPolicy.enabled=true", "webhook.enabled=false", "metrics.enabled=false")
	if np == nil || len(np.Spec.Ingress) != 0 || !cmp.Equal(np.Spec.PodSelector.MatchLabels, map[string]string{"app.kubernetes.io/name": "bar-controller"}) {
		t.Errorf("without webhook and metrics: %+v, want no ingress rule, selecting app.kubernetes.io/name=bar-controller", np)
	}
}

// TestNetworkPolicyValuesSchema: values the policy cannot honour are
// refused, naming the value: a whole family as a Pod CIDR (the API
// server would be excepted with it), no monitoring namespace, no label
// of Prometheus's Pods (any Pod of the namespace could scrape).
func TestNetworkPolicyValuesSchema(t *testing.T) {
	helm, _ := tools(t)
	for _, tc := range []struct {
		set     []string
		wantErr string
	}{
		{[]string{"networkPolicy.podCIDRs={0.0.0.0/0}"}, "podCIDRs"},
		{[]string{"networkPolicy.podCIDRs={::/0}"}, "podCIDRs"},
		{[]string{"networkPolicy.podCIDRs={10.244.0.0}"}, "podCIDRs"},
		{[]string{"networkPolicy.podCIDRs=null"}, "podCIDRs"},
		{[]string{"networkPolicy.monitoringNamespace="}, "monitoringNamespace"},
		{[]string{`networkPolicy.prometheusPodLabels.app\.kubernetes\.io/name=null`}, "prometheusPodLabels"},
		{[]string{"networkPolicy.enable=true"}, "enable"},
	} {
		_, err := template(t, helm, append([]string{"networkPolicy.enabled=true"}, tc.set...)...)
		switch {
		case err == nil:
			t.Errorf("%v: rendered, want the schema to refuse it", tc.set)
		case !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("%v: %v, want an error naming %q", tc.set, err, tc.wantErr)
		}
	}
}
