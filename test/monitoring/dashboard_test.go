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

package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

const dashboardFile = monitoringDir + "/dashboard.json"

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Grafana's own variables stand for durations; the dashboard's for label
// values. Either is replaced by something PromQL accepts before parsing.
var (
	intervalVar = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)
	dashVar     = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	labelValues = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
)

func promQL(grafana string) string {
	return dashVar.ReplaceAllString(intervalVar.ReplaceAllString(grafana, "5m"), "x")
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboardQueriesExportedMetrics: every query of every panel, and
// every variable's label_values, parses as PromQL and reads only metrics
// and labels the controller exports; every panel with queries asks the
// data source the dashboard's user picks (${datasource}), and ids are
// unique, as Grafana needs them.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	all := exported(t)
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: uid %q, title %q: both are needed", dashboardFile, d.UID, d.Title)
	}
	ids := map[int]string{}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			if len(p.Targets) > 0 && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q does not use the dashboard's ${datasource}", p.Title)
			}
			for _, target := range p.Targets {
				queries++
				if strings.TrimSpace(target.Expr) == "" {
					t.Errorf("panel %q, query %s: empty", p.Title, target.RefID)
				}
				for _, err := range checkQuery(all, promQL(target.Expr)) {
					t.Errorf("panel %q, query %s: %v", p.Title, target.RefID, err)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}

	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// A variable's query is a string, or an object holding it.
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
				continue
			}
			q = obj.Query
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(<selector>, <label>)", v.Name, q)
			continue
		}
		for _, err := range checkQuery(all, promQL(m[1])) {
			t.Errorf("variable %s: %v", v.Name, err)
		}
		if err := hasLabel(all, promQL(m[1]), m[2]); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
}

// hasLabel says whether the series of selector carry label.
func hasLabel(all map[string]family, selector, label string) error {
	expr, err := promqlParser.ParseExpr(selector)
	if err != nil {
		return err
	}
	vs, ok := expr.(*parser.VectorSelector)
	if !ok {
		return fmt.Errorf("%s is not a series selector", selector)
	}
	if f, ok := all[vs.Name]; ok && (slices.Contains(f.labels, label) || slices.Contains(targetLabels, label)) {
		return nil
	}
	return fmt.Errorf("%s has no label %s", vs.Name, label)
}

// TestDashboardCheckRefuses: the dashboard check fails a panel query for
// a metric the controller does not export, through Grafana's variables.
func TestDashboardCheckRefuses(t *testing.T) {
	all := exported(t)
	bad := `sum by (result) (rate(bar_controller_sync_results_total{namespace=~"$namespace",pod=~"${pod}"}[$__rate_interval]))`
	if errs := checkQuery(all, promQL(bad)); len(errs) != 1 || !strings.Contains(errs[0].Error(), "exports no metric bar_controller_sync_results_total") {
		t.Errorf("%s: %v, want one error for the unknown metric", bad, errs)
	}
	if err := hasLabel(all, promQL(`bar_controller_build_info{namespace=~"$namespace"}`), "lease"); err == nil {
		t.Error("label_values of a label bar_controller_build_info does not have passed")
	}
}

// TestDashboardSelectsClusterAndJob: the dashboard shows one job of one
// or more clusters, as mixins' dashboards do: a cluster variable (every
// cluster by default, and series without the label too, for a Prometheus
// of one cluster) and a job variable of the jobs that export
// bar_controller_build_info, and every panel's and variable's query selects
// by them, never by a job name written in: a Prometheus that names the
// job otherwise, or holds many clusters, still sees only this controller.
func TestDashboardSelectsClusterAndJob(t *testing.T) {
	d := readDashboard(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, name := range []string{"cluster", "job"} {
		if !vars[name] {
			t.Errorf("no %s variable", name)
		}
	}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, target := range p.Targets {
				if strings.Contains(target.Expr, "bar-controller-metrics") ||
					strings.Count(target.Expr, `cluster=~"$cluster"`) != strings.Count(target.Expr, `job="$job"`) ||
					!strings.Contains(target.Expr, `job="$job"`) {
					t.Errorf("panel %q, query %s: %s does not select by $cluster and $job", p.Title, target.RefID, target.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}
