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
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// monitoringSet turns on everything the chart has of artifacts/monitoring,
// whose discovery grant is for kube-prometheus's Prometheus.
var monitoringSet = []string{
	"monitoring.prometheusRule.enabled=true",
	"monitoring.serviceMonitor.enabled=true",
	"monitoring.dashboard.enabled=true",
	"monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus-k8s",
	"monitoring.serviceMonitor.prometheusServiceAccount.namespace=monitoring",
}

func template(t *testing.T, helm string, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "bar-controller", chart, "--namespace", "bar-controller"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(t, helm, args...)
}

// TestChartMonitoringMatchesKustomize: with monitoring on, the chart's
// PrometheusRule, ServiceMonitor, scraper and discovery grants and the
// dashboard's ConfigMap are artifacts/monitoring's, field for field (the
// ConfigMap carries the label Grafana's sidecar finds it by, and the
// dashboard file as it is). With monitoring off, the
// chart renders none of them (TestChartMatchesKustomize holds the rest).
func TestChartMonitoringMatchesKustomize(t *testing.T) {
	helm, kubectl := tools(t)
	rendered, err := template(t, helm, monitoringSet...)
	if err != nil {
		t.Fatal(err)
	}
	got := objects(t, rendered)
	kustomized, err := run(t, kubectl, "kustomize", "../artifacts/monitoring")
	if err != nil {
		t.Fatal(err)
	}
	want := objects(t, kustomized)

	const dashboard = "ConfigMap/bar-controller/bar-controller-dashboard"
	cm, ok := want[dashboard]
	if !ok {
		t.Fatalf("kubectl kustomize artifacts/monitoring has no %s", dashboard)
	}
	file, err := os.ReadFile("../artifacts/monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if data := cm["data"].(map[string]any)["dashboard.json"]; data != string(file) {
		t.Errorf("%s does not hold artifacts/monitoring/dashboard.json as it is", dashboard)
	}
	if l := cm["metadata"].(map[string]any)["labels"].(map[string]any)["grafana_dashboard"]; l != "1" {
		t.Errorf("%s: label grafana_dashboard %v, want \"1\" (the Grafana sidecar's default)", dashboard, l)
	}

	withoutHelmLabels(t, got)
	for key, w := range want {
		if diff := cmp.Diff(w, got[key]); diff != "" {
			t.Errorf("%s: helm template differs from kubectl kustomize artifacts/monitoring (-kustomize +helm):\n%s", key, diff)
		}
	}

	off, err := template(t, helm)
	if err != nil {
		t.Fatal(err)
	}
	for key := range want {
		if _, ok := objects(t, off)[key]; ok {
			t.Errorf("%s rendered with the default values: monitoring must be opt-in", key)
		}
	}
}

// TestChartServiceMonitorPlainHTTP: with metrics.secure=false the
// endpoint is plain HTTP and answers anyone, so the ServiceMonitor sends
// no token and speaks no TLS, and the chart makes no scraper identity.
func TestChartServiceMonitorPlainHTTP(t *testing.T) {
	helm, _ := tools(t)
	rendered, err := template(t, helm, "monitoring.serviceMonitor.enabled=true", "metrics.secure=false")
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, rendered)
	sm, ok := objs["ServiceMonitor/bar-controller/bar-controller"]
	if !ok {
		t.Fatal("no ServiceMonitor rendered")
	}
	endpoint := sm["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if endpoint["scheme"] != "http" || endpoint["bearerTokenFile"] != nil || endpoint["authorization"] != nil || endpoint["tlsConfig"] != nil {
		t.Errorf("endpoint %v, want plain http without a token or TLS", endpoint)
	}
	for key := range objs {
		if strings.Contains(key, "metrics-scraper") {
			t.Errorf("%s rendered for a plain HTTP endpoint", key)
		}
	}
}

// TestMonitoringValuesSchema: monitoring values the chart cannot honour
// are refused, naming the value.
func TestMonitoringValuesSchema(t *testing.T) {
	helm, _ := tools(t)
	for _, tc := range []struct {
		set     []string
		wantErr string
	}{
		{[]string{"monitoring.serviceMonitor.enabled=true", "metrics.enabled=false"}, "metrics"},
		{[]string{"monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus"}, "namespace"},
		{[]string{"monitoring.serviceMonitor.interval=often"}, "interval"},
		{[]string{"monitoring.prometheusRules.enabled=true"}, "prometheusRules"},
	} {
		_, err := template(t, helm, tc.set...)
		switch {
		case err == nil:
			t.Errorf("%v: rendered, want the schema to refuse it", tc.set)
		case !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("%v: %v, want an error naming %q", tc.set, err, tc.wantErr)
		}
	}
}

// serviceMonitorEndpoint renders the chart with the ServiceMonitor on and
// set, and returns its endpoint and the metrics Service's port name.
func serviceMonitorEndpoint(t *testing.T, helm string, set ...string) (endpoint map[string]any, servicePort string) {
	t.Helper()
	rendered, err := template(t, helm, append([]string{"monitoring.serviceMonitor.enabled=true"}, set...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, rendered)
	sm, ok := objs["ServiceMonitor/bar-controller/bar-controller"]
	if !ok {
		t.Fatal("no ServiceMonitor rendered")
	}
	svc, ok := objs["Service/bar-controller/bar-controller-metrics"]
	if !ok {
		t.Fatal("no metrics Service rendered")
	}
	port := svc["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)
	return sm["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any), port["name"].(string)
}

// TestServiceMonitorInterval: the interval is a Prometheus duration, as
// the ServiceMonitor CRD takes it: 1m30s too, which the schema refused
// before (one number and one unit only); nothing else.
func TestServiceMonitorInterval(t *testing.T) {
	helm, _ := tools(t)
	for _, interval := range []string{"1m30s", "15s", "1h", "500ms", "2m"} {
		if endpoint, _ := serviceMonitorEndpoint(t, helm, "monitoring.serviceMonitor.interval="+interval); endpoint["interval"] != interval {
			t.Errorf("interval %s rendered as %v", interval, endpoint["interval"])
		}
	}
	for _, interval := range []string{"often", "1.5m", "30s1m", "30", "-1m"} {
		_, err := template(t, helm, "monitoring.serviceMonitor.enabled=true", "monitoring.serviceMonitor.interval="+interval)
		switch {
		case err == nil:
			t.Errorf("interval %s rendered, want the schema to refuse it", interval)
		case !strings.Contains(err.Error(), "/monitoring/serviceMonitor/interval"):
			t.Errorf("interval %s: %v, want an error naming it", interval, err)
		}
	}
}

// TestMetricsPortName: the metrics Service's port is named for its
// scheme, https-metrics or, with metrics.secure=false, http-metrics
// (before, https-metrics over plain HTTP), and the ServiceMonitor scrapes
// that port.
func TestMetricsPortName(t *testing.T) {
	helm, _ := tools(t)
	for secure, want := range map[string]string{"true": "https-metrics", "false": "http-metrics"} {
		endpoint, port := serviceMonitorEndpoint(t, helm, "metrics.secure="+secure)
		if port != want || endpoint["port"] != port {
			t.Errorf("metrics.secure=%s: the Service's port %s, the ServiceMonitor's %v, want both %s", secure, port, endpoint["port"], want)
		}
	}
}

// TestServiceMonitorAuthorization: over HTTPS the ServiceMonitor sends a
// token with authorization, from a ServiceAccount token Secret in its own
// namespace (where the Prometheus Operator reads credentials), of a
// ServiceAccount the chart binds to its metrics reader ClusterRole, which
// may get /metrics. Before, it used bearerTokenFile, which the Prometheus
// Operator deprecates (and warns of on every ServiceMonitor), and which
// sent Prometheus's own token, bound by its ServiceAccount's name.
func TestServiceMonitorAuthorization(t *testing.T) {
	helm, _ := tools(t)
	for _, ns := range []string{"bar-controller", "team-a"} {
		args := []string{"template", "tenant", chart, "--namespace", ns, "--set", "monitoring.serviceMonitor.enabled=true"}
		if ns != "bar-controller" {
			args = append(args, "--set", "namespaceScoped=true", "--set", "crds.install=false")
		}
		rendered, err := run(t, helm, args...)
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(t, rendered)
		sm, ok := objs["ServiceMonitor/"+ns+"/bar-controller"]
		if !ok {
			t.Fatalf("namespace %s: no ServiceMonitor rendered", ns)
		}
		endpoint := sm["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		auth, _ := endpoint["authorization"].(map[string]any)
		creds, _ := auth["credentials"].(map[string]any)
		if endpoint["bearerTokenFile"] != nil || endpoint["bearerTokenSecret"] != nil || auth["type"] != "Bearer" || creds["key"] != "token" {
			t.Fatalf("namespace %s: endpoint %v, want authorization of type Bearer from a Secret's token, and no bearerTokenFile", ns, endpoint)
		}
		secret := objs[fmt.Sprintf("Secret/%s/%s", ns, creds["name"])]
		if secret == nil || secret["type"] != "kubernetes.io/service-account-token" || secret["data"] != nil {
			t.Fatalf("namespace %s: the Secret %v is %v, want a ServiceAccount token Secret with no data (the API server fills it)", ns, creds["name"], secret)
		}
		account := secret["metadata"].(map[string]any)["annotations"].(map[string]any)["kubernetes.io/service-account.name"]
		if _, ok := objs[fmt.Sprintf("ServiceAccount/%s/%s", ns, account)]; !ok {
			t.Fatalf("namespace %s: the Secret's ServiceAccount %v is not rendered", ns, account)
		}
		bound := false
		for key, obj := range objs {
			if !strings.HasPrefix(key, "ClusterRoleBinding/") {
				continue
			}
			subjects := obj["subjects"].([]any)
			s := subjects[0].(map[string]any)
			if len(subjects) != 1 || s["name"] != account || s["namespace"] != ns {
				continue
			}
			role := objs["ClusterRole/<nil>/"+obj["roleRef"].(map[string]any)["name"].(string)]
			bound = role != nil && yamlOf(t, role["rules"]) == "- nonResourceURLs:\n  - /metrics\n  verbs:\n  - get"
		}
		if !bound {
			t.Errorf("namespace %s: %v is not bound to a ClusterRole of the release that may get /metrics, and no more", ns, account)
		}
	}
}

// TestNamespacedRulesLeaveOutTheWebhook: a namespaced release serves no
// conversion webhook, so its PrometheusRule has no alert for a webhook
// that is absent; a cluster-wide release keeps it, as artifacts/monitoring
// has it.
func TestNamespacedRulesLeaveOutTheWebhook(t *testing.T) {
	helm, _ := tools(t)
	const alert = "BarControllerConversionWebhookAbsent"
	for _, tc := range []struct {
		set  []string
		want bool
	}{
		{[]string{"monitoring.prometheusRule.enabled=true"}, true},
		{[]string{"monitoring.prometheusRule.enabled=true", "namespaceScoped=true", "crds.install=false"}, false},
	} {
		rendered, err := template(t, helm, tc.set...)
		if err != nil {
			t.Fatal(err)
		}
		rule, ok := objects(t, rendered)["PrometheusRule/bar-controller/bar-controller"]
		if !ok {
			t.Fatalf("%v: no PrometheusRule rendered", tc.set)
		}
		alerts := 0
		found := false
		for _, g := range rule["spec"].(map[string]any)["groups"].([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				alerts++
				found = found || r.(map[string]any)["alert"] == alert
			}
		}
		if found != tc.want || alerts < 10 {
			t.Errorf("%v: %d alerts, %s among them: %v, want %v", tc.set, alerts, alert, found, tc.want)
		}
	}
}

// TestRunbookURLsNameTheRelease: a release's chart links each alert to the
// runbook of its own tag, which describes what that release does; the
// tree's chart (appVersion dev), and one of an untagged commit (git
// describe's form), to main's, as artifacts/monitoring does.
func TestRunbookURLsNameTheRelease(t *testing.T) {
	helm, _ := tools(t)
	refs := map[string]string{"dev": "main", "v1.2.3": "v1.2.3", "v1.3.0-rc.1": "v1.3.0-rc.1", "v1.2.3-4-gabcdef0": "main"}
	for appVersion, ref := range refs {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(chart)); err != nil {
			t.Fatal(err)
		}
		meta, err := os.ReadFile(dir + "/Chart.yaml")
		if err != nil {
			t.Fatal(err)
		}
		meta = []byte(strings.Replace(string(meta), "\nappVersion: dev\n", fmt.Sprintf("\nappVersion: %q\n", appVersion), 1))
		if err := os.WriteFile(dir+"/Chart.yaml", meta, 0o644); err != nil {
			t.Fatal(err)
		}
		rendered, err := run(t, helm, "template", "bar-controller", dir, "--namespace", "bar-controller", "--set", "monitoring.prometheusRule.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		want := "https://github.com/barcontroller/bar-controller/blob/" + ref + "/docs/runbook.md#"
		rule := objects(t, rendered)["PrometheusRule/bar-controller/bar-controller"]
		urls := 0
		for _, g := range rule["spec"].(map[string]any)["groups"].([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				url, _ := r.(map[string]any)["annotations"].(map[string]any)["runbook_url"].(string)
				if !strings.HasPrefix(url, want) {
					t.Errorf("appVersion %s: %s links %q, want %s...", appVersion, r.(map[string]any)["alert"], url, want)
				}
				urls++
			}
		}
		if urls < 10 {
			t.Errorf("appVersion %s: %d alerts", appVersion, urls)
		}
	}
}
