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
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/barcontroller/bar-controller/internal/metrics"
	"github.com/barcontroller/bar-controller/internal/webhookcert"
)

// family is one metric the controller exports: its labels, and its type
// where the registry could say it (a vector with no series yet gathers
// nothing, so its type is unknown).
type family struct {
	labels []string
	typ    *dto.MetricType
}

// descRe reads what a prometheus.Desc says of itself (Desc.String, the
// only way client_golang shows a Desc's name and labels).
var descRe = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: "(?:[^"\\]|\\.)*", unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// mainRegisters are the collectors main.go's run adds to
// metrics.NewRegistry's registry, by the function that makes them, as
// exported registers them too. TestExportedIsMainsRegistry fails when
// main.go registers something else, so that this list cannot fall behind.
var mainRegisters = map[string]func() []prometheus.Collector{
	"metrics.BuildInfo": func() []prometheus.Collector {
		return []prometheus.Collector{metrics.BuildInfo("test", "test", runtime.Version())}
	},
	"webhookcert.Collectors": webhookcert.Collectors,
}

// exported is every metric the controller's /metrics can carry: the
// registry main.go's run builds (metrics.NewRegistry, with client-go's
// work queue, REST client and leader election metrics plugged in, and
// what run adds), as its collectors describe themselves. Vectors are
// described before they have a series, so nothing has to run first.
func exported(t *testing.T) map[string]family {
	t.Helper()
	reg := metrics.NewRegistry()
	for _, collectors := range mainRegisters {
		reg.MustRegister(collectors()...)
	}
	descs := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(descs)
		close(descs)
	}()
	out := map[string]family{}
	constLabel := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for d := range descs {
		m := descRe.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil {
			t.Fatal(err)
		}
		var f family
		for _, c := range constLabel.FindAllStringSubmatch(m[2], -1) {
			f.labels = append(f.labels, c[1])
		}
		for l := range strings.SplitSeq(m[3], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				f.labels = append(f.labels, l)
			}
		}
		out[name] = f
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gathered {
		f := out[g.GetName()]
		f.typ = g.Type
		out[g.GetName()] = f
	}
	// So that a registry that fails to describe itself cannot pass.
	for _, name := range []string{"bar_controller_syncs_total", "workqueue_depth", "leader_election_master_status", "rest_client_requests_total", "process_cpu_seconds_total"} {
		if _, ok := out[name]; !ok {
			t.Fatalf("the controller's registry does not describe %s; it describes %d metrics", name, len(out))
		}
	}
	return out
}

// targetLabels are the labels Prometheus gives every series of a target
// the ServiceMonitor finds (job, instance, and the Prometheus Operator's
// namespace, service, endpoint, pod and container).
var targetLabels = []string{"job", "instance", "namespace", "service", "endpoint", "pod", "container",
	// Not a target's: the label a Prometheus of many clusters (Thanos,
	// Mimir, a federation) gives each cluster's series, by its external
	// labels, which the dashboard's cluster variable reads.
	"cluster"}

// prometheusOwn are series Prometheus makes for each target itself.
var prometheusOwn = map[string]bool{"up": true}

// checkSelector says what is wrong with one vector selector: a metric the
// controller does not export, or a label it does not have. The series of
// a histogram are its name with _bucket (labelled le), _sum and _count.
func checkSelector(all map[string]family, vs *parser.VectorSelector) error {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		return fmt.Errorf("%s names no metric", vs)
	}
	if prometheusOwn[name] {
		return nil
	}
	f, ok := all[name]
	extra := []string{}
	if !ok {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, cut := strings.CutSuffix(name, suffix)
			if !cut {
				continue
			}
			bf, found := all[base]
			if !found {
				break
			}
			switch {
			case bf.typ != nil && *bf.typ != dto.MetricType_HISTOGRAM && !(*bf.typ == dto.MetricType_SUMMARY && suffix != "_bucket"):
				return fmt.Errorf("%s: %s is a %s, it has no %s series", vs, base, bf.typ, suffix)
			case bf.typ == nil && strings.HasSuffix(base, "_total"):
				return fmt.Errorf("%s: %s is a counter, it has no %s series", vs, base, suffix)
			}
			f, ok = bf, true
			if suffix == "_bucket" {
				extra = append(extra, "le")
			}
			if bf.typ != nil && *bf.typ == dto.MetricType_SUMMARY {
				extra = append(extra, "quantile")
			}
		}
	}
	if !ok {
		return fmt.Errorf("%s: bar-controller exports no metric %s", vs, name)
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || slices.Contains(f.labels, m.Name) || slices.Contains(targetLabels, m.Name) || slices.Contains(extra, m.Name) {
			continue
		}
		return fmt.Errorf("%s: %s has no label %s (it has %v, and the target's %v)", vs, name, m.Name, f.labels, targetLabels)
	}
	return nil
}

// promqlParser parses PromQL as Prometheus does with no experimental
// feature enabled.
var promqlParser = parser.NewParser(parser.Options{})

// checkQuery parses a PromQL query and checks each of its selectors.
func checkQuery(all map[string]family, query string) []error {
	expr, err := promqlParser.ParseExpr(query)
	if err != nil {
		return []error{fmt.Errorf("%q: %v", query, err)}
	}
	var errs []error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			if err := checkSelector(all, vs); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	return errs
}

// apiServerExports are the API server's metrics the alerts read, by
// k8s.io/apiextensions-apiserver's pkg/apiserver/conversion/metrics.go at
// the version go.mod names: no registry of the controller holds them.
// test/e2e's TestConversionAlertSeesTheAPIServer holds the alerts'
// selectors of them to what a real API server exports.
var apiServerExports = map[string]family{
	"apiserver_crd_conversion_webhook_duration_seconds": {
		labels: []string{"crd_name", "from_version", "to_version", "succeeded"},
		typ:    dto.MetricType_HISTOGRAM.Enum(),
	},
}

// TestRulesQueryExportedMetrics: every metric an alert reads is one the
// controller exports, or the API server's one of apiServerExports, with
// labels it has, so that no alert waits for a series that never comes.
func TestRulesQueryExportedMetrics(t *testing.T) {
	all := exported(t)
	maps.Copy(all, apiServerExports)
	_, groups := prometheusRule(t)
	for _, group := range groups.Groups {
		for _, r := range group.Rules {
			for _, err := range checkQuery(all, r.Expr) {
				t.Errorf("%s%s: %v", r.Alert, r.Record, err)
			}
		}
	}
}

// TestCheckQueryRefuses: the check fails a query for a metric that does
// not exist, a label a metric does not have, a histogram suffix on
// something that is no histogram, and PromQL that does not parse; it
// passes a histogram's buckets and Prometheus's own up.
func TestCheckQueryRefuses(t *testing.T) {
	all := exported(t)
	for query, wantErr := range map[string]string{
		`rate(bar_controller_syncs_total{result="error"}[5m])`:                                      "",
		`histogram_quantile(0.99, sum by (le) (rate(workqueue_queue_duration_seconds_bucket[5m])))`: "",
		`up{job="bar-controller-metrics"} == 0`:                                                     "",
		`rate(bar_controller_sync_total[5m])`:                                                       "exports no metric bar_controller_sync_total",
		`bar_controller_syncs_total{reslt="error"}`:                                                 "has no label reslt",
		`rate(bar_controller_syncs_total_count[5m])`:                                                "no _count series",
		`sum(rate(bar_controller_syncs_total[5m]`:                                                   "unclosed",
	} {
		errs := checkQuery(all, query)
		switch {
		case wantErr == "" && len(errs) > 0:
			t.Errorf("%s: %v", query, errs)
		case wantErr != "" && (len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), wantErr)):
			t.Errorf("%s: %v, want an error saying %q", query, errs, wantErr)
		}
	}
}

// registrations are the makers of what a Go file's MustRegister calls
// register ("pkg.Func"; anything else by its Go type).
func registrations(path string) ([]string, error) {
	f, err := goparser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "MustRegister" {
			return true
		}
		for _, arg := range call.Args {
			e := arg
			if made, ok := e.(*ast.CallExpr); ok {
				e = made.Fun
			}
			name := fmt.Sprintf("%T", e)
			if sel, ok := e.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok {
					name = pkg.Name + "." + sel.Sel.Name
				}
			}
			out = append(out, name)
		}
		return true
	})
	return out, nil
}

// TestExportedIsMainsRegistry: main.go registers exactly what the
// functions of mainRegisters make, so exported describes the metrics the
// controller serves, not an older set; and a registration it does not
// know is noticed.
func TestExportedIsMainsRegistry(t *testing.T) {
	got, err := registrations("../../main.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name := range mainRegisters {
		want = append(want, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("main.go registers %v with MustRegister, exported registers %v: update mainRegisters", got, want)
	}

	other := filepath.Join(t.TempDir(), "main.go")
	src := "package main\nfunc run() { r := metrics.NewRegistry(); r.MustRegister(metrics.BuildInfo(), leader.Collectors()...) }\n"
	if err := os.WriteFile(other, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := registrations(other); err != nil || !slices.Equal(got, []string{"metrics.BuildInfo", "leader.Collectors"}) {
		t.Errorf("registrations of %q: %v, %v", src, got, err)
	}
}
