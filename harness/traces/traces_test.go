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

// A create as the controller logs it, pid and all: one sync that writes,
// a stale-cache retry, and the echo sync.
var rawCreate = []string{
	`I1124 03:17:34.015129   23287 envvar.go:195] "Feature gate default state" feature="AtomicFIFO" enabled=true`,
	`I1124 03:17:34.044660   23287 reflector.go:507] "Caches populated" type="*v1.Bar" reflector="pkg/mod/k8s.io/client-go@v0.37.2/tools/cache/reflector.go:343"`,
	`I1124 03:17:34.301943   23287 trace.go:98] "Event" logger="trace" bar="default/example" handler="addBar" object="default/example" resourceVersion="236" via="self"`,
	`I1124 03:17:34.302101   23287 trace.go:122] "Enqueued" logger="trace" bar="default/example" queueDepth=1 collapsed=false`,
	`I1124 03:17:34.302154   23287 trace.go:138] "Dequeued" logger="trace" bar="default/example" queueDepth=0 requeues=0 waited="98.335µs"`,
	`I1124 03:17:34.302245   23287 trace.go:166] "Sync started" logger="trace" bar="default/example" barResourceVersion="236" generation=1 deployment="example-nginx" deploymentResourceVersion="none"`,
	`I1124 03:17:34.308050   23287 trace.go:147] "Sync" logger="trace" bar="default/example" decision="no Deployment in the cache: create it"`,
	`I1124 03:17:34.328681   23287 trace.go:191] "API call" logger="trace" bar="default/example" call="apply deployments/example-nginx" took="20.582192ms" resourceVersion="237"`,
	`I1124 03:17:34.328766   23287 trace.go:150] "Sync" logger="trace" bar="default/example" decision="status changed: write it" detail="ReplicasUnavailable"`,
	`I1124 03:17:34.347979   23287 trace.go:191] "API call" logger="trace" bar="default/example" call="apply bars/example/status" took="19.187735ms" resourceVersion="239"`,
	`I1124 03:17:34.348016   23287 trace.go:203] "Sync done" logger="trace" bar="default/example" took="45.844496ms" result="success"`,
	`I1124 03:17:34.348058   23287 trace.go:138] "Dequeued" logger="trace" bar="default/example" queueDepth=0 requeues=0 waited="19.438139ms"`,
	`I1124 03:17:34.348089   23287 trace.go:150] "Sync" logger="trace" bar="default/example" decision="cache older than our last write: wait and retry" detail="bars cache has read up to resourceVersion 236 but the controller wrote 239"`,
	`I1124 03:17:34.348158   23287 trace.go:200] "Sync done" logger="trace" bar="default/example" took="35.909µs" result="stale_cache" err="bars cache has read up to resourceVersion 236 but the controller wrote 239"`,
	`I1124 03:17:34.349957   23287 trace.go:138] "Dequeued" logger="trace" bar="default/example" queueDepth=0 requeues=0 waited="154.023µs"`,
	`I1124 03:17:34.350090   23287 trace.go:166] "Sync started" logger="trace" bar="default/example" barResourceVersion="239" generation=1 deployment="example-nginx" deploymentResourceVersion="237"`,
	`I1124 03:17:34.350581   23287 trace.go:147] "Sync" logger="trace" bar="default/example" decision="Deployment up to date: no write"`,
	`I1124 03:17:34.350607   23287 trace.go:150] "Sync" logger="trace" bar="default/example" decision="status unchanged: no write" detail="ReplicasUnavailable"`,
	`I1124 03:17:34.350620   23287 trace.go:203] "Sync done" logger="trace" bar="default/example" took="555.097µs" result="success"`,
	`I1124 03:17:34.373459   23287 trace.go:98] "Event" logger="trace" bar="default/example" handler="updateDeployment" object="default/example-nginx" resourceVersion="242" via="controllerRef" oldResourceVersion="237"`,
}

func TestSelectShowsLinesAsTheDocsDo(t *testing.T) {
	got := Select(rawCreate)
	if len(got) != len(rawCreate)-1 {
		t.Fatalf("Select kept %d lines, want all but the feature gate's %d", len(got), len(rawCreate)-1)
	}
	want := `I1124 03:17:34.301943 trace.go:98] "Event" handler="addBar" object="default/example" resourceVersion="236" via="self"`
	if got[1] != want {
		t.Errorf("Select gave\n%s\nwant\n%s", got[1], want)
	}
}

func TestSummaryLeavesOutWhatVaries(t *testing.T) {
	a := Summary(Select(rawCreate))
	// Another run: other resourceVersions and durations, no stale cache,
	// and an event of another informer in between.
	var other []string
	for _, s := range rawCreate {
		if strings.Contains(s, "stale_cache") || strings.Contains(s, "cache older") || strings.Contains(s, `waited="19.438139ms"`) {
			continue
		}
		other = append(other, strings.NewReplacer(`"237"`, `"301"`, `"239"`, `"305"`, "20.582192ms", "3ms").Replace(s))
	}
	other = slices.Insert(other, 5, `I1124 03:17:34.302200   23287 reflector.go:507] "Caches populated" type="*v1.Bar" reflector="k8s.io/client-go@v0.37.2/tools/cache/reflector.go:343"`)
	if d := Diff(a, Summary(Select(other))); d != "" {
		t.Errorf("runs that differ only in timing compare unequal:\n%s", d)
	}

	renamed := slices.Clone(rawCreate)
	renamed[6] = strings.Replace(renamed[6], "no Deployment in the cache", "no Deployment cached", 1)
	d := Diff(a, Summary(Select(renamed)))
	if !strings.Contains(d, "-     "+`trace.go:147 "Sync" decision="no Deployment in the cache: create it"`) ||
		!strings.Contains(d, "+     "+`trace.go:147 "Sync" decision="no Deployment cached: create it"`) {
		t.Errorf("a changed decision does not show in the diff:\n%s", d)
	}
}

// testDoc is a document with every capture of informer-traces.md, each
// with prose before it, and the create in two blocks.
func testDoc(names []string) string {
	var doc []string
	for _, n := range names {
		doc = append(doc, "prose before "+n, "<!-- capture: "+n+" -->", "```", "old", "```", "<!-- /capture -->")
		if n == "create" {
			doc = append(doc, "prose between", "<!-- capture: create -->", "```", "```", "<!-- /capture -->")
		}
	}
	return strings.Join(doc, "\n")
}

func testCaptures(names []string) Captures {
	caps := Captures{}
	for _, n := range names {
		caps[n] = []string{"I1124 03:17:34.000000 x.go:1] \"" + n + "\""}
	}
	caps["create"] = Select(rawCreate)
	return caps
}

func TestRewriteKeepsProseAndSplitsTheCreate(t *testing.T) {
	d := Documents[0]
	caps := testCaptures(d.Names)
	out, err := d.Rewrite(testDoc(d.Names), caps)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\nold\n") || !strings.Contains(out, "prose between") || !strings.Contains(out, "prose before restart-v6") {
		t.Fatalf("Rewrite lost prose or kept an old capture:\n%s", out)
	}
	back, err := d.Committed(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back["create"], caps["create"]) {
		t.Errorf("the create's two blocks do not join back to the capture:\n%s", strings.Join(back["create"], "\n"))
	}
	first := strings.Index(out, "<!-- /capture -->")
	if !strings.Contains(out[:first], `"Sync done" took="555.097µs"`) || strings.Contains(out[:first], `"updateDeployment"`) {
		t.Errorf("the first block should end with the echo sync:\n%s", out[:first])
	}
	if d, err := d.Compare(out, caps); err != nil || d != "" {
		t.Errorf("a document just rewritten from captures differs from them: %v\n%s", err, d)
	}
}

// Two documents may show the same capture; each is checked and rewritten
// on its own, and each must show all of its captures and no other.
func TestDocumentsAreCheckedEachOnItsOwn(t *testing.T) {
	traces := Document{Path: "docs/a.md", Names: []string{"create", "scale"}}
	exercises := Document{Path: "docs/b.md", Names: []string{"scale", "metrics"}}
	caps := testCaptures([]string{"create", "scale"})
	caps["metrics"] = []string{`workqueue_depth{name="bars"} 0`}

	for _, d := range []Document{traces, exercises} {
		out, err := d.Rewrite(testDoc(d.Names), caps)
		if err != nil {
			t.Fatalf("%s: %v", d.Path, err)
		}
		back, err := d.Committed(out)
		if err != nil {
			t.Fatalf("%s: %v", d.Path, err)
		}
		if !slices.Equal(back["scale"], caps["scale"]) {
			t.Errorf("%s: the shared capture scale is %q, want %q", d.Path, back["scale"], caps["scale"])
		}
	}

	for _, tc := range []struct {
		name string
		doc  Document
		text string
		want string
	}{{
		name: "a capture missing",
		doc:  exercises,
		text: testDoc([]string{"scale"}),
		want: "docs/b.md: no capture metrics (a line <!-- capture: metrics --> before its fenced block)",
	}, {
		name: "a capture of another document",
		doc:  exercises,
		text: testDoc([]string{"create", "scale", "metrics"}),
		want: "docs/b.md:2: capture create is not one of this document's (scale, metrics)",
	}, {
		name: "a marker without its block",
		doc:  traces,
		text: "<!-- capture: create -->\nno fence",
		want: "docs/a.md:1: capture create: the marker must be followed by a ``` line",
	}, {
		name: "a command's output in two blocks",
		doc:  exercises,
		text: testDoc([]string{"scale", "metrics", "metrics"}),
		want: "docs/b.md: capture metrics is shown in 2 blocks; a command's output is shown in one",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.doc.Rewrite(tc.text, caps)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Rewrite: got error %v, want %q", err, tc.want)
			}
			if tc.name == "a command's output in two blocks" {
				return // Committed joins the blocks; only Rewrite must cut them.
			}
			if _, err := tc.doc.Compare(tc.text, caps); err == nil || err.Error() != tc.want {
				t.Errorf("Compare: got error %v, want %q", err, tc.want)
			}
		})
	}

	if _, err := exercises.Compare(testDoc(exercises.Names), Captures{"scale": caps["scale"]}); err == nil ||
		err.Error() != "docs/b.md: the run made no capture metrics" {
		t.Errorf("Compare with a capture the run did not make: got %v", err)
	}
}
