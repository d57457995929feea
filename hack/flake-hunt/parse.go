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
	"bufio"
	"io"
	"regexp"
	"strconv"
)

// result is how one test ended in one run.
type result struct {
	status  string // PASS, FAIL or SKIP
	seconds float64
}

// logLine is one t.Log line, and the test that logged it.
type logLine struct {
	test, text string
}

// run is what one test binary printed with -test.v.
type run struct {
	results map[string]result
	order   []string // tests in the order their results were printed
	logs    []logLine
}

var (
	// "=== RUN   TestX", "=== CONT  TestX", "=== NAME  TestX": the lines
	// after it are TestX's, until the next such line. Parallel tests
	// interleave; -test.v names the test whenever the output switches.
	switchRE = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
	// "--- PASS: TestX (12.30s)", indented for subtests.
	resultRE = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \((\d+(?:\.\d+)?)s\)`)
	// "    file_test.go:123: text": the first line of a t.Log message (its
	// further lines are indented more, without a file name).
	logRE = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)
)

// parseRun reads the -test.v output of one run.
func parseRun(r io.Reader) (*run, error) {
	out := &run{results: map[string]result{}}
	current := ""
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		line := s.Text()
		if m := switchRE.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := resultRE.FindStringSubmatch(line); m != nil {
			secs, _ := strconv.ParseFloat(m[3], 64)
			if _, seen := out.results[m[2]]; !seen {
				out.order = append(out.order, m[2])
			}
			out.results[m[2]] = result{status: m[1], seconds: secs}
			continue
		}
		if m := logRE.FindStringSubmatch(line); m != nil && current != "" {
			out.logs = append(out.logs, logLine{test: current, text: m[1]})
		}
	}
	return out, s.Err()
}
