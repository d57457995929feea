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

// Package monitoring holds the tests of the monitoring shipped in
// artifacts/monitoring: promtool check rules and promtool test rules over
// the PrometheusRule's alerts (they need promtool, $PROMTOOL: make
// test-monitoring builds it from source), and, with nothing to build,
// that every alert has a firing and a silent test case and a runbook
// section (docs/runbook.md), that the chart's copy of the rules is the
// same file, and that every metric the alerts and the Grafana dashboard
// query is one the controller exports (or, for the alert on the API
// server's own count of its conversion calls, one the API server does).
package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	monitoringDir = "../../artifacts/monitoring"
	ruleFile      = monitoringDir + "/prometheusrule.yaml"
	// The chart renders its PrometheusRule from this copy (its
	// templates/prometheusrule.yaml): a chart cannot read files outside
	// its directory.
	chartRuleFile = "../../charts/bar-controller/files/prometheusrule.yaml"
	runbookFile   = "../../docs/runbook.md"
	// The name the promtool tests give the rules (their rule_files): the
	// PrometheusRule's spec, which promtool reads as a plain rule file.
	rulesName  = "bar-controller.rules.yaml"
	runbookURL = "https://github.com/barcontroller/bar-controller/blob/main/docs/runbook.md"
)

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

// prometheusRule reads the PrometheusRule: its spec as it is, for
// promtool, and decoded.
func prometheusRule(t *testing.T) (spec []byte, groups ruleGroups) {
	t.Helper()
	data, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &obj); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", ruleFile, obj.APIVersion, obj.Kind)
	}
	if spec, err = yaml.Marshal(obj.Spec); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(spec, &groups); err != nil {
		t.Fatalf("%s spec: %v", ruleFile, err)
	}
	return spec, groups
}

// alerts are the alerting rules, in file order.
func (g ruleGroups) alerts() []rule {
	var out []rule
	for _, group := range g.Groups {
		for _, r := range group.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// promtool returns $PROMTOOL, skipping the test without it, or failing it
// when $BAR_REQUIRE_PROMTOOL says it must be there.
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		if os.Getenv("BAR_REQUIRE_PROMTOOL") != "" {
			t.Fatal("$PROMTOOL must name promtool (make test-monitoring)")
		}
		t.Skip("needs $PROMTOOL: run make test-monitoring")
	}
	return p
}

// workDir holds what promtool reads: the rules as a plain rule file, and
// a copy of every test file beside it.
func workDir(t *testing.T) (dir string, tests []string) {
	t.Helper()
	spec, _ := prometheusRule(t)
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, rulesName), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(monitoringDir, "tests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests in %s/tests: %v", monitoringDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		copied := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(copied, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, copied)
	}
	return dir, tests
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.Bytes())
		return
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.Bytes())
}

// TestPromtoolCheckRules: the rules are valid as Prometheus loads them
// (syntax, templates, durations, duplicate names).
func TestPromtoolCheckRules(t *testing.T) {
	dir, _ := workDir(t)
	runPromtool(t, "check", "rules", filepath.Join(dir, rulesName))
}

// TestPromtoolTestRules runs every alert's unit tests (tests/*.yaml).
func TestPromtoolTestRules(t *testing.T) {
	_, tests := workDir(t)
	runPromtool(t, append([]string{"test", "rules"}, tests...)...)
}

type unitTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertIsTested: each alert has a promtool case in which it
// fires and one in which it stays silent, so that an alert added without
// tests fails here. A case naming no alert of the rules fails too:
// promtool passes a silent case for an alert that does not exist.
func TestEveryAlertIsTested(t *testing.T) {
	_, groups := prometheusRule(t)
	files, err := filepath.Glob(filepath.Join(monitoringDir, "tests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Not strict: promtool's format has fields this test does not read.
		var u unitTests
		if err := yaml.Unmarshal(data, &u); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(u.RuleFiles) != 1 || u.RuleFiles[0] != rulesName {
			t.Errorf("%s: rule_files %v, want [%s]", f, u.RuleFiles, rulesName)
		}
		for _, tg := range u.Tests {
			for _, c := range tg.AlertRuleTest {
				if len(c.ExpAlerts) > 0 {
					fires[c.Alertname]++
				} else {
					silent[c.Alertname]++
				}
			}
		}
	}
	known := map[string]bool{}
	for _, a := range groups.alerts() {
		known[a.Alert] = true
		if fires[a.Alert] == 0 {
			t.Errorf("%s: no promtool test case in which it fires", a.Alert)
		}
		if silent[a.Alert] == 0 {
			t.Errorf("%s: no promtool test case in which it stays silent", a.Alert)
		}
	}
	for name := range fires {
		if !known[name] {
			t.Errorf("the promtool tests name %s, which is no alert of %s", name, ruleFile)
		}
	}
	for name := range silent {
		if !known[name] {
			t.Errorf("the promtool tests name %s, which is no alert of %s", name, ruleFile)
		}
	}
	if len(known) == 0 {
		t.Fatalf("%s has no alerts", ruleFile)
	}
}

// TestEveryAlertHasARunbook: each alert says how bad it is, what it is
// about, and links to its own section of docs/runbook.md, which exists;
// the runbook has no section for an alert that is gone.
func TestEveryAlertHasARunbook(t *testing.T) {
	_, groups := prometheusRule(t)
	data, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok && strings.HasPrefix(name, "BarController") {
			sections[name] = true
		}
	}
	for _, a := range groups.alerts() {
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", a.Alert, s)
		}
		for _, key := range []string{"summary", "description"} {
			if a.Annotations[key] == "" {
				t.Errorf("%s: no %s", a.Alert, key)
			}
		}
		// GitHub's anchor of a heading that is one word: the word in lower case.
		if want := runbookURL + "#" + strings.ToLower(a.Alert); a.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, a.Annotations["runbook_url"], want)
		}
		if !sections[a.Alert] {
			t.Errorf("%s: no section \"## %s\" in %s", a.Alert, a.Alert, runbookFile)
		}
		delete(sections, a.Alert)
	}
	for name := range sections {
		t.Errorf("%s has a section for %s, which is no alert of %s", runbookFile, name, ruleFile)
	}
}

// TestChartRulesAreTheSame: the chart's copy of the PrometheusRule is the
// file kustomize applies, byte for byte, so the two installs alert alike.
func TestChartRulesAreTheSame(t *testing.T) {
	want, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(chartRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s: copy it (cp %s %s)", chartRuleFile, ruleFile,
			strings.TrimPrefix(ruleFile, "../../"), strings.TrimPrefix(chartRuleFile, "../../"))
	}
}

// TestMonitoringIsOptIn: the default install (kubectl apply -k
// artifacts/, or artifacts/install) does not include artifacts/monitoring,
// whose objects fail to apply without the Prometheus Operator's CRDs.
func TestMonitoringIsOptIn(t *testing.T) {
	for _, k := range []string{"../../artifacts/kustomization.yaml", "../../artifacts/install/kustomization.yaml"} {
		data, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		var kustomization struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(data, &kustomization); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if len(kustomization.Resources) == 0 {
			t.Fatalf("%s lists no resources", k)
		}
		for _, r := range kustomization.Resources {
			if strings.Contains(r, "monitoring") {
				t.Errorf("%s includes %s: monitoring must stay opt-in", k, r)
			}
		}
	}
}
