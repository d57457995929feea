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
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// monitoringSet turns on everything the chart has of artifacts/monitoring,
// with the scraper artifacts/monitoring/metrics-reader-binding.yaml binds.
var monitoringSet = []string{
	"monitoring.prometheusRule.enabled=true",
	"monitoring.serviceMonitor.enabled=true",
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
// PrometheusRule, ServiceMonitor and scraper binding are
// artifacts/monitoring's, field for field (the dashboard's ConfigMap is
// kustomize's alone: Grafana's sidecar finds it by its label, which it
// carries, with the dashboard file as it is). With monitoring off, the
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
	delete(want, dashboard)

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
// no token and speaks no TLS.
func TestChartServiceMonitorPlainHTTP(t *testing.T) {
	helm, _ := tools(t)
	rendered, err := template(t, helm, "monitoring.serviceMonitor.enabled=true", "metrics.secure=false")
	if err != nil {
		t.Fatal(err)
	}
	sm, ok := objects(t, rendered)["ServiceMonitor/bar-controller/bar-controller"]
	if !ok {
		t.Fatal("no ServiceMonitor rendered")
	}
	endpoint := sm["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if endpoint["scheme"] != "http" || endpoint["bearerTokenFile"] != nil || endpoint["tlsConfig"] != nil {
		t.Errorf("endpoint %v, want plain http without a token or TLS", endpoint)
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
