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

package model

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The columns of test/bench's markdownTable (report.go) the model reads,
// found by their headers rather than their places, so that a column added
// to the report does not shift what is read.
const (
	colBars      = "Bars"
	colUnrelated = "unrelated Deployments"
	colFloor     = "floor: min–max (median)"
	colRuns      = "controller runs"
	colWrites    = "writes per Bar"
	colLists     = "LIST / WATCH"
	colRSS       = "peak RSS"
	colHeap      = "live heap"
	colCPU       = "CPU"
	colServer    = "API server + etcd CPU"
	// colBench is read where a report has it (since f6e6f43): the
	// CPU account (account.go) needs it, the fit does not.
	colBench = "the bench's own CPU"
	// colRatio is the converge ratio as the report computed it, from
	// unrounded times: the account compares it, not Run ÷ Floor, whose
	// times are rounded to 0.1 s (4 s at 500 Bars).
	colRatio = "median ÷ median floor"
)

var (
	numberRe = regexp.MustCompile(`^-?[0-9]+(?:\.[0-9]+)?`)
	medianRe = regexp.MustCompile(`\(median (-?[0-9]+(?:\.[0-9]+)?)\)`)
	listedRe = regexp.MustCompile(`\(([0-9]+(?:\.[0-9]+)?)\)\s*$`)
	commitRe = regexp.MustCompile(`, commit (\S+),`)
	// headroomRe is test/bench's buildLine.
	headroomRe = regexp.MustCompile(`, controller --gc-headroom-percent=([0-9]+),`)
)

// headroomOf is the --gc-headroom-percent named on the first line of text
// that begins with written, UnnamedHeadroom if that line names none.
func headroomOf(text, written string) int {
	for l := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(l, written) {
			continue
		}
		if m := headroomRe.FindStringSubmatch(l); m != nil {
			v, _ := strconv.Atoi(m[1])
			return v
		}
		break
	}
	return UnnamedHeadroom
}

// ParseReport reads the rows of the first table in a report written by
// make bench whose header begins "| Bars |".
func ParseReport(name, text string) ([]Row, error) {
	lines := strings.Split(text, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| Bars |") })
	if start < 0 {
		return nil, fmt.Errorf("%s: no table with a Bars column", name)
	}
	header := cells(lines[start])
	col := map[string]int{}
	for _, want := range []string{colBars, colUnrelated, colFloor, colRuns, colWrites, colLists, colRSS, colHeap, colCPU, colServer} {
		// "CPU" is a whole header; the others open theirs.
		i := slices.IndexFunc(header, func(h string) bool {
			return h == want || (want != colCPU && want != colBars && strings.HasPrefix(h, want))
		})
		if i < 0 {
			return nil, fmt.Errorf("%s: no column %q in %q", name, want, lines[start])
		}
		col[want] = i
	}
	for _, optional := range []string{colBench, colRatio} {
		if i := slices.IndexFunc(header, func(h string) bool { return strings.HasPrefix(h, optional) }); i >= 0 {
			col[optional] = i
		}
	}
	var rows []Row
	for i, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		c := cells(l)
		if len(c) != len(header) {
			return nil, fmt.Errorf("%s: table row %d has %d cells, the header %d", name, i+1, len(c), len(header))
		}
		r, err := parseRow(c, col)
		if err != nil {
			return nil, fmt.Errorf("%s: table row %d: %w", name, i+1, err)
		}
		r.Report = name
		r.Headroom = headroomOf(text, "Written by `make bench`")
		if m := commitRe.FindStringSubmatch(text); m != nil {
			r.Commit = m[1]
		} else {
			r.Commit = "unknown"
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: the table has no rows", name)
	}
	return rows, nil
}

func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	c := strings.Split(line, "|")
	for i := range c {
		c[i] = strings.TrimSpace(c[i])
	}
	return c
}

func parseRow(c []string, col map[string]int) (Row, error) {
	var r Row
	var err error
	num := func(what string, s string) float64 {
		if err != nil {
			return 0
		}
		var v float64
		v, err = leading(s)
		if err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
		return v
	}
	r.N = int(num(colBars, c[col[colBars]]))
	r.Unrelated = int(num(colUnrelated, c[col[colUnrelated]]))
	r.Floor = num(colFloor, medianOf(c[col[colFloor]]))
	r.Writes = num(colWrites, c[col[colWrites]])
	r.PeakRSS = num(colRSS, c[col[colRSS]])
	r.LiveHeap = num(colHeap, c[col[colHeap]])
	r.CPU = num(colCPU, c[col[colCPU]])
	if err != nil {
		return Row{}, err
	}
	if m := listedRe.FindStringSubmatch(c[col[colLists]]); m != nil {
		r.WatchLists, _ = strconv.ParseFloat(m[1], 64)
	} else {
		return Row{}, fmt.Errorf("%s: no count of watches that listed in %q", colLists, c[col[colLists]])
	}
	var runs []float64
	for _, s := range strings.Split(c[col[colRuns]], ",") {
		runs = append(runs, num(colRuns, strings.TrimSpace(s)))
	}
	r.Run = median(runs)
	// "floors spread; runs spread (ratio×)": each spread is "x–y s
	// (median m)" or, measured once, "x s".
	floors, runsCPU, ok := strings.Cut(c[col[colServer]], ";")
	if !ok {
		return Row{}, fmt.Errorf("%s: no ';' between floors and runs in %q", colServer, c[col[colServer]])
	}
	r.Server = num(colServer, medianOf(floors))
	r.ServerRun = num(colServer, medianOf(runsCPU))
	if i, ok := col[colBench]; ok {
		floors, runs, ok := strings.Cut(c[i], ";")
		if !ok {
			return Row{}, fmt.Errorf("%s: no ';' between floors and runs in %q", colBench, c[i])
		}
		r.HasBenchCPU = true
		r.BenchFloor = num(colBench, medianOf(floors))
		r.BenchRun = num(colBench, medianOf(runs))
	}
	if i, ok := col[colRatio]; ok {
		r.ReportedRatio = num(colRatio, c[i])
	}
	return r, err
}

// medianOf is the median a spread names, or the spread itself when it is
// one value.
func medianOf(spread string) string {
	if m := medianRe.FindStringSubmatch(spread); m != nil {
		return m[1]
	}
	return strings.TrimSpace(spread)
}

func leading(s string) (float64, error) {
	m := numberRe.FindString(strings.TrimSpace(s))
	if m == "" {
		return 0, fmt.Errorf("no number at the start of %q", s)
	}
	return strconv.ParseFloat(m, 64)
}

// median is the report's: the middle value, or the mean of the two in the
// middle.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// gcPartBegin opens the part of docs/benchmarks-large.md that make bench-gc
// writes (test/bench's gcheadroom.go).
const gcPartBegin = "<!-- GC headroom part"

// ParseGCPart reads the cold starts of make bench-gc's table, its columns
// found by their headers.
func ParseGCPart(text string) ([]GCRun, error) {
	i := strings.Index(text, gcPartBegin)
	if i < 0 {
		return nil, fmt.Errorf("no GC headroom part (%q)", gcPartBegin)
	}
	lines := strings.Split(text[i:], "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| Bars |") })
	if start < 0 {
		return nil, errors.New("the GC headroom part has no table with a Bars column")
	}
	header := cells(lines[start])
	col := map[string]int{}
	for _, want := range []string{colBars, "--gc-headroom-percent", colHeap, colCPU} {
		if col[want] = slices.Index(header, want); col[want] < 0 {
			return nil, fmt.Errorf("the GC headroom table has no column %q", want)
		}
	}
	var runs []GCRun
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		c := cells(l)
		if len(c) != len(header) {
			return nil, fmt.Errorf("GC headroom row %q: %d cells, the header %d", l, len(c), len(header))
		}
		var v [4]float64
		for k, name := range []string{colBars, "--gc-headroom-percent", colHeap, colCPU} {
			var err error
			if v[k], err = leading(c[col[name]]); err != nil {
				return nil, fmt.Errorf("GC headroom row %q, %s: %w", l, name, err)
			}
		}
		runs = append(runs, GCRun{N: int(v[0]), Headroom: int(v[1]), LiveMiB: v[2], CPU: v[3]})
	}
	if len(runs) == 0 {
		return nil, errors.New("the GC headroom table has no rows")
	}
	return runs, nil
}
