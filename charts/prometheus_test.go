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
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// prometheusOperatorVersion is the Prometheus Operator whose CRDs the
// test installs: its module on the Go module proxy carries them, as its
// release does, in example/prometheus-operator-crd.
const prometheusOperatorVersion = "v0.85.0"

// prometheusOperatorCRDs downloads that module and returns the directory
// of its CRDs.
func prometheusOperatorCRDs(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator@"+prometheusOperatorVersion)
	cmd.Dir = t.TempDir() // no go.mod here: nothing is added to one
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download the Prometheus Operator %s: %v\n%s", prometheusOperatorVersion, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json: %v: %s", err, out)
	}
	return filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
}

// TestPrometheusFindsTheRelease installs the chart with monitoring on into
// a real API server that has the Prometheus Operator's CRDs, and checks
// that both common Prometheus stacks would find it:
//   - kube-prometheus-stack's Prometheus selects ServiceMonitors and
//     PrometheusRules in every namespace by its release label, which
//     monitoring.serviceMonitor.labels and monitoring.prometheusRule.labels
//     put on them (before, nothing but commonLabels could, on every object);
//   - kube-prometheus's Prometheus, the ServiceAccount prometheus-k8s in
//     monitoring, discovers targets only where it is granted to list
//     Services, Endpoints, EndpointSlices and Pods: named in
//     monitoring.serviceMonitor.prometheusServiceAccount, it is, in the
//     release's namespace and nowhere else, and may get /metrics (before,
//     the API server answered its list 403, and no target was found).
func TestPrometheusFindsTheRelease(t *testing.T) {
	helmBin := requireHelm(t)
	requireControlPlane(t)
	crds := prometheusOperatorCRDs(t)
	cluster := startCluster(t)
	ctx := t.Context()
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		if out, err := cluster.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(crds, f)); err != nil {
			t.Fatalf("%s: %v\n%s", f, err, out)
		}
	}
	if out, err := cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	createNamespace(t, kube, "monitoring", nil)
	createNamespace(t, kube, "bar-controller", nil)
	helm := newHelm(t, helmBin, cluster.Kubeconfig)
	helm.run(t, "install", "bar-controller", chart, "--namespace", "bar-controller",
		"--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
		"--set", "monitoring.serviceMonitor.labels.release=kps,monitoring.prometheusRule.labels.release=kps",
		"--set", "monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus-k8s",
		"--set", "monitoring.serviceMonitor.prometheusServiceAccount.namespace=monitoring")

	// kube-prometheus-stack: serviceMonitorSelector and ruleSelector
	// {matchLabels: {release: kps}}, in every namespace.
	dyn := dynamic.NewForConfigOrDie(cluster.Config)
	for _, resource := range []string{"servicemonitors", "prometheusrules"} {
		gvr := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: resource}
		list, err := dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "release=kps"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].GetNamespace() != "bar-controller" || list.Items[0].GetName() != "bar-controller" {
			t.Errorf("%s selected by release=kps: %d, want bar-controller/bar-controller", resource, len(list.Items))
		}
	}

	// kube-prometheus: what its Prometheus's service discovery lists, as
	// the API server answers that ServiceAccount.
	as := rest.CopyConfig(cluster.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:monitoring:prometheus-k8s",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"}}
	as.WarningHandler = rest.NoWarnings{} // v1 Endpoints is deprecated
	prom := kubernetes.NewForConfigOrDie(as)
	lists := map[string]func(ns string) error{
		"services": func(ns string) error {
			_, err := prom.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"endpoints": func(ns string) error {
			_, err := prom.CoreV1().Endpoints(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"endpointslices": func(ns string) error {
			_, err := prom.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"pods": func(ns string) error { _, err := prom.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err },
	}
	for name, list := range lists {
		if err := list("bar-controller"); err != nil {
			t.Errorf("prometheus-k8s lists %s in bar-controller: %v", name, err)
		}
		if err := list("default"); !apierrors.IsForbidden(err) {
			t.Errorf("prometheus-k8s lists %s in default: %v, want forbidden (the chart grants its own namespace only)", name, err)
		}
	}
	if _, err := prom.CoreV1().Secrets("bar-controller").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("prometheus-k8s lists Secrets in bar-controller: %v, want forbidden", err)
	}
	review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  as.Impersonate.UserName,
			Groups:                as.Impersonate.Groups,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Allowed {
		t.Errorf("prometheus-k8s may not get /metrics: %s", review.Status.Reason)
	}
}
