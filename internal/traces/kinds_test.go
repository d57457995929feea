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
		`16s         Normal    DeploymentUpdated    bar/example   Updated Deployment example-nginx to match the Bar: metadata.labels`,
		`2s          Warning   DeploymentNotOwned   bar/example   Deployment blocker already exists with no controller, so this Bar does not manage it`,
	}
	// The same Events later: the ages are longer, one Event repeated, so
	// the first column is wider and the others start further right; and
	// this run recreated the Deployment with a create (recreated).
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
		{"events: other ages, a series, the other recreate", "foreign-events", events, later, true},
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

// The two ways the sync after exercise 2's delete recreates the
// Deployment, as two runs on one machine printed them (trimmed to a line
// per step): recreated makes them one, and only them.
func TestRecreatedMakesTheTwoOrdersOne(t *testing.T) {
	// The managed Deployments' informer first.
	managedFirst := []string{
		`I1124 05:20:17.038214 trace.go:98] "Event" handler="deleteDeployment" object="default/example-nginx" resourceVersion="264" via="controllerRef"`,
		`I1124 05:20:17.038488 trace.go:122] "Enqueued" queueDepth=1 collapsed=false`,
		`I1124 05:20:17.038599 trace.go:138] "Dequeued" queueDepth=0 requeues=0 waited="198.787µs"`,
		`I1124 05:20:17.038712 trace.go:166] "Sync started" barResourceVersion="263" generation=1 deployment="example-nginx" deploymentResourceVersion="none"`,
		`I1124 05:20:17.038921 trace.go:147] "Sync" decision="Deployment lost its managed-by label: apply with force"`,
		`I1124 05:20:17.039817 trace.go:98] "Event" handler="deleteDeployment" object="default/example-nginx" resourceVersion="264" via="controllerRef"`,
		`I1124 05:20:17.079960 trace.go:191] "API call" call="apply deployments/example-nginx" took="41.02294ms" resourceVersion="265"`,
		`I1124 05:20:17.080230 sync.go:197] "Applied Deployment" bar="default/example" deployment="default/example-nginx" created=false`,
		`I1124 05:20:17.080635 event_broadcaster.go:338] "Event occurred" object="default/example" kind="Bar" apiVersion="barcontroller.dev/v1" type="Normal" reason="DeploymentUpdated" action="Update" note="Updated Deployment example-nginx to match the Bar: metadata.labels"`,
		`I1124 05:20:17.080733 trace.go:150] "Sync" decision="status changed: write it" detail="ReplicasUnavailable"`,
		`I1124 05:20:17.100884 trace.go:191] "API call" call="apply bars/example/status" took="20.121415ms" resourceVersion="267"`,
		`I1124 05:20:17.100920 trace.go:203] "Sync done" took="62.302971ms" result="success"`,
		`I1124 05:20:17.101440 trace.go:138] "Dequeued" queueDepth=0 requeues=0 waited="29.494µs"`,
		`I1124 05:20:17.101468 trace.go:166] "Sync started" barResourceVersion="267" generation=1 deployment="example-nginx" deploymentResourceVersion="265"`,
		`I1124 05:20:17.101581 trace.go:147] "Sync" decision="Deployment up to date: no write"`,
		`I1124 05:20:17.101595 trace.go:150] "Sync" decision="status unchanged: no write" detail="ReplicasUnavailable"`,
		`I1124 05:20:17.101792 trace.go:203] "Sync done" took="207.272µs" result="success"`,
	}
	// The metadata informer first: a sync that still finds the old
	// Deployment in the managed cache, then the create.
	metadataFirst := []string{
		`I1124 06:01:02.000100 trace.go:98] "Event" handler="deleteDeployment" object="default/example-nginx" resourceVersion="301" via="controllerRef"`,
		`I1124 06:01:02.000200 trace.go:122] "Enqueued" queueDepth=1 collapsed=false`,
		`I1124 06:01:02.000300 trace.go:138] "Dequeued" queueDepth=0 requeues=0 waited="100µs"`,
		`I1124 06:01:02.000400 trace.go:166] "Sync started" barResourceVersion="300" generation=1 deployment="example-nginx" deploymentResourceVersion="290"`,
		`I1124 06:01:02.000500 trace.go:147] "Sync" decision="Deployment up to date: no write"`,
		`I1124 06:01:02.000600 trace.go:150] "Sync" decision="status unchanged: no write" detail="DeploymentAvailable"`,
		`I1124 06:01:02.000700 trace.go:203] "Sync done" took="300µs" result="success"`,
		`I1124 06:01:02.001000 trace.go:98] "Event" handler="deleteDeployment" object="default/example-nginx" resourceVersion="301" via="controllerRef"`,
		`I1124 06:01:02.001100 trace.go:138] "Dequeued" queueDepth=0 requeues=0 waited="50µs"`,
		`I1124 06:01:02.001200 trace.go:166] "Sync started" barResourceVersion="300" generation=1 deployment="example-nginx" deploymentResourceVersion="none"`,
		`I1124 06:01:02.001300 trace.go:147] "Sync" decision="no Deployment in the cache: create it"`,
		`I1124 06:01:02.020000 trace.go:191] "API call" call="apply deployments/example-nginx" took="18ms" resourceVersion="302"`,
		`I1124 06:01:02.020100 sync.go:197] "Applied Deployment" bar="default/example" deployment="default/example-nginx" created=true`,
		`I1124 06:01:02.020200 event_broadcaster.go:338] "Event occurred" object="default/example" kind="Bar" apiVersion="barcontroller.dev/v1" type="Normal" reason="DeploymentCreated" action="Create" note="Created Deployment example-nginx"`,
		`I1124 06:01:02.020300 trace.go:150] "Sync" decision="status changed: write it" detail="ReplicasUnavailable"`,
		`I1124 06:01:02.040000 trace.go:191] "API call" call="apply bars/example/status" took="19ms" resourceVersion="304"`,
		`I1124 06:01:02.040100 trace.go:203] "Sync done" took="39ms" result="success"`,
	}
	summary := kindOf("delete").summary
	if d := Diff(summary(managedFirst), summary(metadataFirst)); d != "" {
		t.Errorf("the two orders of the informers compare unequal:\n%s", d)
	}
	// Elsewhere the two stay apart: a created=false is an update there.
	if Diff(Summary(managedFirst), Summary(metadataFirst)) == "" {
		t.Error("the plain log form makes the two recreates one")
	}
	// And a changed message still shows.
	changed := slices.Clone(managedFirst)
	changed[4] = strings.Replace(changed[4], "lost its managed-by label", "lost its label", 1)
	if d := Diff(summary(managedFirst), summary(changed)); !strings.Contains(d, `+     trace.go:147 "Sync" decision="Deployment lost its label: apply with force"`) {
		t.Errorf("a changed decision does not show:\n%s", d)
	}
}
