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
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

// rendered is what helm template gave for one set of values.
type rendered struct {
	objects    map[string]map[string]any // by kind/namespace/name
	deployment *appsv1.Deployment
}

// renderValues runs helm template with values (YAML, written to a file
// as an operator's -f would be) and set, in the namespace bar-controller.
func renderValues(t *testing.T, helm, values string, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "bar-controller", chart, "--namespace", "bar-controller"}
	if values != "" {
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", file)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(t, helm, args...)
}

// mustRender renders values and decodes the Deployment strictly: a field
// the chart puts where the Pod spec has none fails here, as the API
// server's field validation would fail the install.
func mustRender(t *testing.T, helm, values string) rendered {
	t.Helper()
	out, err := renderValues(t, helm, values)
	if err != nil {
		t.Fatalf("values %q: %v", values, err)
	}
	r := rendered{objects: objects(t, out)}
	obj, ok := r.objects["Deployment/bar-controller/bar-controller"]
	if !ok {
		t.Fatalf("values %q: no Deployment rendered", values)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, &d, true); err != nil {
		t.Fatalf("values %q: the Deployment: %v", values, err)
	}
	r.deployment = &d
	return r
}

// labels returns the metadata labels of an object rendered.
func labels(obj map[string]any) map[string]any {
	l, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any)
	return l
}

// yamlOf is a compact form of v for comparing and for messages.
func yamlOf(t *testing.T, v any) string {
	t.Helper()
	b, err := sigsyaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestValuesDocumented: every top-level value has a row in the chart
// README's values table, so that an operator finds it without reading
// the templates.
func TestValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := sigsyaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Values\n")
	if !ok {
		t.Fatal("the chart README has no Values section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	for key := range values {
		if !strings.Contains(table, "| `"+key) && !strings.Contains(table, ", `"+key) {
			t.Errorf("%s has no row in the chart README's values table", key)
		}
	}
}
