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
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"sigs.k8s.io/yaml"
)

// shippedRules is the spec of artifacts/monitoring's PrometheusRule: a
// rule file as promtool reads it.
func shippedRules(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(artifactsDir, "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Spec
}

// shippedAlert is one alerting rule of shippedRules, by name.
func shippedAlert(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, g := range shippedRules(t)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if rule := r.(map[string]any); rule["alert"] == name {
				return rule
			}
		}
	}
	t.Fatalf("artifacts/monitoring/prometheusrule.yaml has no alert %s", name)
	return nil
}

// Minutes of each phase in the series given to promtool.
const convertingMinutes, failingMinutes = 20, 25

// checkAlertOnRealSeries runs promtool test rules over the shipped rules
// with the API server's conversion series as Prometheus (job apiserver)
// would have scraped them: each label set the API server exported
// growing every minute, for convertingMinutes, by what it counted between
// before and converted, then, for failingMinutes, by what it counted
// between untrusted and failing. The alert must stay silent to the end
// of the first phase and fire 10 minutes into the second, saying that
// every call failed. It needs $PROMTOOL, which make test sets.
func checkAlertOnRealSeries(t *testing.T, sel matchers, before, converted, untrusted, failing conversionSeries) {
	t.Helper()
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		if os.Getenv("BAR_REQUIRE_PROMTOOL") != "" {
			t.Fatal("$PROMTOOL must name promtool (hack/install-test-deps.sh)")
		}
		t.Log("no $PROMTOOL: the API server's series were not run through the alert")
		return
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(shippedRules(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}

	var series []map[string]string
	crd := ""
	for key, c := range failing {
		if !sel.matches(c.labels) {
			continue
		}
		crd = c.labels.Get("crd_name")
		a, b := converted[key].count-before[key].count, c.count-untrusted[key].count
		values := make([]string, 0, convertingMinutes+failingMinutes+1)
		for i := range convertingMinutes + failingMinutes + 1 {
			v := a * float64(min(i, convertingMinutes))
			if i > convertingMinutes {
				v += b * float64(i-convertingMinutes)
			}
			values = append(values, strconv.FormatFloat(v, 'f', -1, 64))
		}
		var name strings.Builder
		name.WriteString(conversionMetric + `_count{job="apiserver"`)
		c.labels.Range(func(l labels.Label) {
			name.WriteString("," + l.Name + "=" + strconv.Quote(l.Value))
		})
		name.WriteString("}")
		series = append(series, map[string]string{"series": name.String(), "values": strings.Join(values, " ")})
	}
	if len(series) == 0 {
		t.Fatal("the API server exported no series the alert selects")
	}

	alert := shippedAlert(t, conversionAlert)
	annotations := map[string]string{}
	for k, v := range alert["annotations"].(map[string]any) {
		// Every call of the failing phase failed: 100%.
		s := strings.NewReplacer("{{ $value | humanizePercentage }}", "100%", "{{ $labels.crd_name }}", crd, "{{ $labels.job }}", "apiserver").Replace(v.(string))
		if strings.Contains(s, "{{") {
			t.Fatalf("%s's %s has a template this test does not fill in: %s", conversionAlert, k, v)
		}
		annotations[k] = s
	}
	tests := map[string]any{
		"rule_files":          []string{"rules.yaml"},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":     "1m",
			"input_series": series,
			"alert_rule_test": []any{
				map[string]any{"eval_time": strconv.Itoa(convertingMinutes) + "m", "alertname": conversionAlert},
				map[string]any{"eval_time": strconv.Itoa(convertingMinutes+12) + "m", "alertname": conversionAlert, "exp_alerts": []any{map[string]any{
					"exp_labels":      map[string]string{"severity": "critical", "job": "apiserver", "crd_name": crd},
					"exp_annotations": annotations,
				}}},
			},
		}},
	}
	data, err := yaml.Marshal(tests)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "real-series.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(promtool, "test", "rules", file)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool test rules over the API server's series: %v\n%s\n%s", err, out.Bytes(), data)
		return
	}
	t.Logf("promtool test rules over the API server's series (%d label sets): silent while converting, firing after 10 minutes of failures", len(series))
}
