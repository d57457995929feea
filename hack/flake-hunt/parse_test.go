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

package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// What a test binary prints with -test.v when two parallel tests and a
// subtest interleave (go1.26), with one multi-line log message.
const verboseRun = `=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== PAUSE TestB
=== CONT  TestA
=== CONT  TestB
    toy_test.go:17: b says 3
=== RUN   TestB/sub
    toy_test.go:19: sub says 1.50
=== NAME  TestA
    toy_test.go:11: converged in 1.234s; TokenReviews 7
    toy_test.go:12: multi
        line 42
--- FAIL: TestA (0.02s)
=== NAME  TestB
    toy_test.go:22: b again 2s
--- PASS: TestB (0.04s)
    --- PASS: TestB/sub (0.00s)
FAIL
`

func TestParseRun(t *testing.T) {
	r, err := parseRun(strings.NewReader(verboseRun))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"TestA", "TestB", "TestB/sub"}; !slices.Equal(r.order, want) {
		t.Errorf("tests %v, want %v", r.order, want)
	}
	if got := r.results["TestA"]; got.status != "FAIL" || got.seconds != 0.02 {
		t.Errorf("TestA %+v, want FAIL in 0.02s", got)
	}
	if got := r.results["TestB/sub"]; got.status != "PASS" {
		t.Errorf("TestB/sub %+v, want PASS", got)
	}
	want := []logLine{
		{"TestB", "b says 3"},
		{"TestB/sub", "sub says 1.50"},
		{"TestA", "converged in 1.234s; TokenReviews 7"},
		{"TestA", "multi"},
		{"TestB", "b again 2s"},
	}
	if !slices.Equal(r.logs, want) {
		t.Errorf("log lines\n%q\nwant\n%q", r.logs, want)
	}
}

// TestReport: three runs of the same test, one of them failed; the figures
// of a line come together across runs and units.
func TestReport(t *testing.T) {
	var runs []*run
	for _, out := range []string{
		"=== RUN   TestX\n    x_test.go:9: converged in 8.3s; reviews 10\n--- PASS: TestX (12.00s)\nPASS\n",
		"=== RUN   TestX\n    x_test.go:9: converged in 19.1s; reviews 30\n    x_test.go:10: want at most 14.39s\n--- FAIL: TestX (25.00s)\nFAIL\n",
		"=== RUN   TestX\n    x_test.go:9: converged in 900ms; reviews 20\n--- PASS: TestX (13.00s)\nPASS\n",
	} {
		r, err := parseRun(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	s := summarize(runs, []int{0, 1, 0})
	if got := s.failedRuns(); !slices.Equal(got, []int{2}) {
		t.Errorf("failed runs %v, want [2]", got)
	}
	var text bytes.Buffer
	s.writeText(&text, "x", 1)
	for _, want := range []string{
		"runs passed: 2/3; run 2 exit 1",
		"TestX  2/3     12s  13s     25s  failed in run 2",
		"  converged in {1}; reviews {2}\n      (3 lines in 3 of 3 runs)\n      {1}  0.9s / 8.3s / 19.1s\n      {2}  10 / 20 / 30\n",
		"  want at most {1}\n      (1 lines in 1 of 3 runs)\n      {1}  14.39s / 14.39s / 14.39s\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, text.String())
		}
	}
	var md bytes.Buffer
	s.writeMarkdown(&md, "x", 2)
	for _, want := range []string{
		"x: 2 of 3 runs passed.",
		"| `TestX` | 2/3 | 12s / 13s / 25s |",
		"| `TestX` | `converged in {1}; reviews {2}` | {1} | 0.9s | 8.3s | 19.1s |\n|  |  | {2} | 10 | 20 | 30 |\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "want at most") {
		t.Errorf("a figure logged in 1 run shows with --min-runs=2:\n%s", md.String())
	}
}
