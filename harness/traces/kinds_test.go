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

package traces

import (
	"slices"
	"strings"
	"testing"
)

// Each case compares a capture as the docs hold it (a) with a fresh one
// (b) in the comparable form of its kind: equal when only what varies
// from run to run differs, unequal when the code's output changed.
func TestCommandOutputsCompareInTheirStableForm(t *testing.T) {
	events := []string{
		`LAST SEEN   TYPE      REASON               OBJECT        MESSAGE`,
		`19s         Normal    DeploymentCreated    bar/example   Created Deployment example-nginx`,
		`16s         Normal    DeploymentCreated    bar/example   Created Deployment example-nginx`,
		`2s          Warning   DeploymentNotOwned   bar/example   Deployment blocker already exists with no controller, so this Bar does not manage it`,
	}
	// The same Events later: the ages are longer, one Event repeated, so
	// the first column is wider and the others start further right.
	later := []string{
		`LAST SEEN              TYPE      REASON               OBJECT        MESSAGE`,
		`2m1s                   Normal    DeploymentCreated    bar/example   Created Deployment example-nginx`,
		`118s                   Normal    DeploymentCreated    bar/example   Created Deployment example-nginx`,
		`5s (x2 over 2m)        Warning   DeploymentNotOwned   bar/example   Deployment blocker already exists with no controller, so this Bar does not manage it`,
	}
	bar := []string{
		`NAME      DEPLOYMENT   DESIRED   AVAILABLE   READY   REASON               AGE`,
		`example   blocker      3         0           False   DeploymentNotOwned   19s`,
	}
	metrics := []string{
		`bar_controller_syncs_total{result="stale_cache"} 1`,
		`bar_controller_syncs_total{result="success"} 17`,
		`workqueue_adds_total{name="bars"} 18`,
		`workqueue_queue_duration_seconds_bucket{name="bars",le="0.001"} 14`,
		`workqueue_queue_duration_seconds_sum{name="bars"} 0.15240621200000004`,
	}
	replace := func(lines []string, old, new string) []string {
		out := slices.Clone(lines)
		for i := range out {
			out[i] = strings.Replace(out[i], old, new, 1)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		kind  string
		a, b  []string
		equal bool
	}{
		{"events: other ages, a series", "foreign-events", events, later, true},
		{"events: a changed message", "foreign-events", events, replace(events, "does not manage it", "leaves it alone"), false},
		{"events: another type", "foreign-events", events, replace(events, "Warning ", "Normal  "), false},
		{"events: one missing", "foreign-events", events, events[:3], false},
		{"bar: another age", "foreign-bar", bar, replace(bar, "19s", "3m7s"), true},
		{"bar: another reason", "foreign-bar", bar, replace(bar, "DeploymentNotOwned", "DeploymentAvailable"), false},
		{"bar: a column renamed", "foreign-bar", bar, replace(bar, "DESIRED", "WANTED "), false},
		{"metrics: other values, no stale cache", "metrics", metrics, replace(replace(metrics, "} 18", "} 25"), "stale_cache", "success"), true},
		{"metrics: a renamed metric", "metrics", metrics, replace(metrics, "workqueue_adds_total", "workqueue_added_total"), false},
		{"metrics: another bucket", "metrics", metrics, replace(metrics, `le="0.001"`, `le="0.002"`), false},
		{"metrics: no success", "metrics", metrics, metrics[:1], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			summary := kindOf(tc.kind).summary
			d := Diff(summary(tc.a), summary(tc.b))
			if tc.equal && d != "" {
				t.Errorf("compare unequal:\n%s", d)
			}
			if !tc.equal && d == "" {
				t.Errorf("compare equal:\n%s", strings.Join(summary(tc.a), "\n"))
			}
		})
	}
}

func TestColumnsDropsAgesAndKeepsCells(t *testing.T) {
	got := Columns("LAST SEEN")([]string{
		`LAST SEEN         TYPE      REASON              OBJECT        MESSAGE`,
		`5s (x2 over 2m)   Normal    DeploymentCreated   bar/example   Created Deployment example-nginx`,
		`2s                Warning   DeploymentNotOwned  bar/example   Deployment blocker already exists`,
		``,
	})
	// Cells with single spaces stay whole; a cell that fills its column
	// up to the next one (kubectl pads by three, a hand-edited table may
	// not) still ends where the next header starts.
	want := []string{
		"TYPE | REASON | OBJECT | MESSAGE",
		"  Normal | DeploymentCreated | bar/example | Created Deployment example-nginx",
		"  Warning | DeploymentNotOwned | bar/example | Deployment blocker already exists",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Columns gave\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
