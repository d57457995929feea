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
	"os/exec"
	"path/filepath"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// selectorTests are promtool unit tests of the rules rendered with
// selector job="bc",cluster="east", apiServerSelector cluster="east" and
// clusterLabel cluster: series of the default job, and of cluster west,
// are not this install's, and what fires keeps its cluster.
const selectorTests = `rule_files:
- rules.yaml
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'bar_controller_syncs_total{job="bc",cluster="east",namespace="bc",result="error"}'
    values: '0+10x40'
  - series: 'bar_controller_syncs_total{job="bc",cluster="east",namespace="bc",result="success"}'
    values: '0+10x40'
  - series: 'bar_controller_syncs_total{job="bc",cluster="west",namespace="bc",result="success"}'
    values: '0+10x40'
  - series: 'bar_controller_syncs_total{job="bar-controller-metrics",cluster="west",namespace="bc",result="error"}'
    values: '0+10x40'
  - series: 'apiserver_crd_conversion_webhook_duration_seconds_count{job="apiserver",cluster="east",crd_name="bars.barcontroller.dev",succeeded="false"}'
    values: '0+10x40'
  - series: 'apiserver_crd_conversion_webhook_duration_seconds_count{job="apiserver",cluster="west",crd_name="bars.barcontroller.dev",succeeded="false"}'
    values: '0+10x40'
  alert_rule_test:
  - eval_time: 35m
    alertname: BarControllerSyncErrors
    exp_alerts:
    - exp_labels: {severity: warning, cluster: east, namespace: bc, job: bc}
      exp_annotations:
        summary: More than 10% of bar-controller's syncs fail.
        description: 50% of the syncs in bc ended in an error over the last 15 minutes.
        runbook_url: https://github.com/barcontroller/bar-controller/blob/main/docs/runbook.md#barcontrollersyncerrors
  - eval_time: 35m
    alertname: BarControllerConversionFailing
    exp_alerts:
    - exp_labels: {severity: critical, cluster: east, job: apiserver, crd_name: bars.barcontroller.dev}
      exp_annotations:
        summary: The API server fails to convert Bars through bar-controller's conversion webhook.
        description: "100% of the API server's calls to the conversion webhook of bars.barcontroller.dev (apiserver) failed over 5 minutes, for 10 minutes: reads and writes of Bars in a version other than the stored one fail with them."
        runbook_url: https://github.com/barcontroller/bar-controller/blob/main/docs/runbook.md#barcontrollerconversionfailing
`

// TestRuleSelectors: the chart's alerts take their selectors as mixins
// do. With monitoring.prometheusRule.selector, .apiServerSelector and
// .clusterLabel set, the rules promtool checks select that job of that
// cluster (the default job's series and another cluster's are left out)
// and keep the cluster label on what fires; before, every expression
// named job="bar-controller-metrics" and aggregated clusters together.
func TestRuleSelectors(t *testing.T) {
	helm, _ := tools(t)
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		if os.Getenv("BAR_REQUIRE_PROMTOOL") != "" {
			t.Fatal("$PROMTOOL must name promtool (hack/install-tool.sh promtool)")
		}
		t.Skip("needs $PROMTOOL: run make test-monitoring")
	}
	rendered, err := renderValues(t, helm, `monitoring:
  prometheusRule:
    enabled: true
    selector: job="bc",cluster="east"
    apiServerSelector: cluster="east"
    clusterLabel: cluster
`)
	if err != nil {
		t.Fatal(err)
	}
	rule, ok := objects(t, rendered)["PrometheusRule/bar-controller/bar-controller"]
	if !ok {
		t.Fatal("no PrometheusRule rendered")
	}
	spec, err := sigsyaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"rules.yaml": spec, "tests.yaml": []byte(selectorTests)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "tests.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
