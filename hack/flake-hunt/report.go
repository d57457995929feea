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
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// testSummary is one test over all runs.
type testSummary struct {
	name             string
	pass, fail, skip int
	failedIn         []int // run numbers, from 1
	seconds          []float64
}

// figureGroup is every line of one test with one template, from all runs.
type figureGroup struct {
	test, template string
	runs           []int // the runs that logged it, from 1
	lines          int
	slots          [][]figure // slots[i] holds every value of placeholder {i+1}
}

// summary is what the report prints.
type summary struct {
	runs    int
	exits   []int // each run's exit status
	tests   []*testSummary
	figures []*figureGroup
}

// summarize folds the runs together. exits has one exit status per run.
func summarize(runs []*run, exits []int) *summary {
	s := &summary{runs: len(runs), exits: exits}
	tests := map[string]*testSummary{}
	groups := map[[2]string]*figureGroup{}
	for i, r := range runs {
		n := i + 1
		for _, name := range r.order {
			ts := tests[name]
			if ts == nil {
				ts = &testSummary{name: name}
				tests[name] = ts
				s.tests = append(s.tests, ts)
			}
			res := r.results[name]
			switch res.status {
			case "PASS":
				ts.pass++
			case "FAIL":
				ts.fail++
				ts.failedIn = append(ts.failedIn, n)
			case "SKIP":
				ts.skip++
			}
			if res.status != "SKIP" {
				ts.seconds = append(ts.seconds, res.seconds)
			}
		}
		for _, l := range r.logs {
			tmpl, figs := template(l.text)
			if len(figs) == 0 {
				continue
			}
			key := [2]string{l.test, tmpl}
			g := groups[key]
			if g == nil {
				g = &figureGroup{test: l.test, template: tmpl, slots: make([][]figure, len(figs))}
				groups[key] = g
				s.figures = append(s.figures, g)
			}
			if len(g.runs) == 0 || g.runs[len(g.runs)-1] != n {
				g.runs = append(g.runs, n)
			}
			g.lines++
			for j, f := range figs {
				g.slots[j] = append(g.slots[j], f)
			}
		}
	}
	// A test's figures together, tests in the order they first reported.
	rank := map[string]int{}
	for i, t := range s.tests {
		rank[t.name] = i
	}
	slices.SortStableFunc(s.figures, func(a, b *figureGroup) int {
		ra, oka := rank[a.test]
		rb, okb := rank[b.test]
		if !oka {
			ra = len(rank)
		}
		if !okb {
			rb = len(rank)
		}
		return ra - rb
	})
	return s
}

// failedRuns lists the runs that did not exit 0.
func (s *summary) failedRuns() []int {
	var out []int
	for i, e := range s.exits {
		if e != 0 {
			out = append(out, i+1)
		}
	}
	return out
}

// spread is the minimum, median and maximum of vs (not empty).
func spread(vs []float64) (lo, med, hi float64) {
	sorted := slices.Clone(vs)
	slices.Sort(sorted)
	n := len(sorted)
	med = sorted[n/2]
	if n%2 == 0 {
		med = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return sorted[0], med, sorted[n-1]
}

// values returns a slot's values and whether they are all durations.
func values(slot []figure) ([]float64, bool) {
	vs := make([]float64, len(slot))
	durations := true
	for i, f := range slot {
		vs[i] = f.value
		durations = durations && f.duration
	}
	return vs, durations
}

// format prints a figure: seconds with an "s", a count without decimals.
func format(v float64, seconds bool) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	switch {
	case seconds && v != 0 && v < 0.01 && v > -0.01:
		s = strconv.FormatFloat(v, 'g', 3, 64)
	case seconds || v != float64(int64(v)):
		s = strconv.FormatFloat(v, 'f', 3, 64)
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if seconds {
		return s + "s"
	}
	return s
}

func (s *summary) writeText(w io.Writer, title string, minRuns int) {
	fmt.Fprintf(w, "%s: %d runs\n", title, s.runs)
	failed := s.failedRuns()
	fmt.Fprintf(w, "runs passed: %d/%d", s.runs-len(failed), s.runs)
	for _, n := range failed {
		fmt.Fprintf(w, "; run %d exit %d", n, s.exits[n-1])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TEST\tPASSED\tMIN\tMEDIAN\tMAX\tNOTES")
	for _, t := range s.tests {
		lo, med, hi := "-", "-", "-"
		if len(t.seconds) > 0 {
			l, m, h := spread(t.seconds)
			lo, med, hi = format(l, true), format(m, true), format(h, true)
		}
		var notes []string
		if len(t.failedIn) > 0 {
			notes = append(notes, "failed in run "+joinInts(t.failedIn))
		}
		if t.skip > 0 {
			notes = append(notes, fmt.Sprintf("skipped %d", t.skip))
		}
		if missing := s.runs - t.pass - t.fail - t.skip; missing > 0 {
			notes = append(notes, fmt.Sprintf("no result in %d", missing))
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\n", t.name, t.pass, s.runs, lo, med, hi, strings.Join(notes, "; "))
	}
	tw.Flush()

	shown, hidden := 0, 0
	test := ""
	for _, g := range s.figures {
		if len(g.runs) < minRuns {
			hidden++
			continue
		}
		if shown == 0 {
			fmt.Fprintln(w, "\nFigures logged (min / median / max over every line with that template):")
		}
		shown++
		if g.test != test {
			test = g.test
			fmt.Fprintf(w, "%s\n", test)
		}
		fmt.Fprintf(w, "  %s\n", g.template)
		fmt.Fprintf(w, "      (%d lines in %d of %d runs)\n", g.lines, len(g.runs), s.runs)
		for i, slot := range g.slots {
			vs, secs := values(slot)
			lo, med, hi := spread(vs)
			fmt.Fprintf(w, "      {%d}  %s / %s / %s\n", i+1, format(lo, secs), format(med, secs), format(hi, secs))
		}
	}
	if hidden > 0 {
		fmt.Fprintf(w, "\n%d more templates were logged in fewer than %d runs (see the logs).\n", hidden, minRuns)
	}
}

// writeMarkdown prints the same as tables to paste into
// docs/measurements/gate-timing.md: one row per test, one row per figure.
func (s *summary) writeMarkdown(w io.Writer, title string, minRuns int) {
	failed := s.failedRuns()
	fmt.Fprintf(w, "%s: %d of %d runs passed.\n\n", title, s.runs-len(failed), s.runs)
	fmt.Fprintln(w, "| test | passed | time min / median / max |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, t := range s.tests {
		times := "-"
		if len(t.seconds) > 0 {
			lo, med, hi := spread(t.seconds)
			times = fmt.Sprintf("%s / %s / %s", format(lo, true), format(med, true), format(hi, true))
		}
		fmt.Fprintf(w, "| `%s` | %d/%d | %s |\n", t.name, t.pass, s.runs, times)
	}
	first := true
	for _, g := range s.figures {
		if len(g.runs) < minRuns {
			continue
		}
		if first {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| test | logged | figure | min | median | max |")
			fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
			first = false
		}
		// The test and the template once, on the row of their first figure.
		test, tmpl := "`"+g.test+"`", escapeCell(g.template)
		for i, slot := range g.slots {
			vs, secs := values(slot)
			lo, med, hi := spread(vs)
			fmt.Fprintf(w, "| %s | %s | {%d} | %s | %s | %s |\n", test, tmpl, i+1,
				format(lo, secs), format(med, secs), format(hi, secs))
			test, tmpl = "", ""
		}
	}
}

// escapeCell puts a template in a code span inside a table cell: its
// "*" and "<time>" stay as they are, and only "|" needs escaping.
func escapeCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}
