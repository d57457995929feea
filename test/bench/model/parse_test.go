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
	"strings"
	"testing"
)

// header and the rows below are in the form test/bench's markdownTable
// writes: two runs and three floors per row, or one run and two floors.
const header = "| Bars | unrelated Deployments | floor: min–max (median) | controller runs | median ÷ median floor | Events all written, after convergence | writes per Bar: Deployment + status + event (+ other) | idle writes (restart, 2 resyncs) | LIST / WATCH (that listed) | peak RSS | live heap | CPU | API server + etcd CPU: floors, controller runs (medians ÷) |\n" +
	"| ---: | ---: | --- | --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | --- |\n"

const (
	twoRuns = "| 500 | 0 | 2.3–2.7 s (median 2.6) | 4.1 s, 4.6 s | 1.69× | 0.2 s, 0.5 s | 3.00 = 1.00 + 1.00 + 1.00 (+ 0.00) | 0, 0 | 0 / 3 (3) | 45.2 MB | 9.1 MB | 1.3 s | 4.1–4.8 s (median 4.6); 6.6–7.3 s (median 6.9) (1.52×) |\n"
	oneRun  = "| 50000 | 0 | 257.5–262.9 s (median 260.2) | 431.7 s | 1.66× | 0.4 s | 3.00 = 1.00 + 1.00 + 1.00 (+ 0.00) | 0, 0 | 0 / 4 (3) | 766.8 MB | 345.8 MB | 108.9 s | 459.6–462.9 s (median 461.2); 621.4 s (1.35×) |\n"
	preface = "# Benchmarks\n\nWritten by `make bench` (test/bench) on 2026-11-24 12:35 UTC, commit 887edd6-dirty, go1.26.8, 2 CPUs:\n\n"
)

func TestParseReport(t *testing.T) {
	rows, err := ParseReport("b.md", preface+header+twoRuns+oneRun+"\n![plot](b.png)\n\n| Bars | other |\n| --- | --- |\n| 1 | 2 |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Report: "b.md", Commit: "887edd6-dirty", N: 500, Floor: 2.6, Run: 4.35, CPU: 1.3, PeakRSS: 45.2, LiveHeap: 9.1, ServerRun: 6.9, Server: 4.6, Writes: 3, WatchLists: 3, ReportedRatio: 1.69, Headroom: UnnamedHeadroom},
		{Report: "b.md", Commit: "887edd6-dirty", N: 50000, Floor: 260.2, Run: 431.7, CPU: 108.9, PeakRSS: 766.8, LiveHeap: 345.8, ServerRun: 621.4, Server: 461.2, Writes: 3, WatchLists: 3, ReportedRatio: 1.66, Headroom: UnnamedHeadroom},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i := range want {
		if !near(rows[i].Run, want[i].Run) {
			t.Errorf("row %d: Run %v, want %v", i, rows[i].Run, want[i].Run)
		}
		rows[i].Run = want[i].Run
		if rows[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, rows[i], want[i])
		}
	}
}

// A column the report adds does not move what the model reads.
func TestParseReportFindsColumnsByHeader(t *testing.T) {
	add := func(line, cell string) string {
		i := strings.Index(line, "| peak RSS")
		if strings.HasPrefix(line, "| 500 ") {
			i = strings.Index(line, "| 45.2 MB")
		}
		if strings.HasPrefix(line, "| ---") {
			return "| ---: " + line
		}
		return line[:i] + "| " + cell + " " + line[i:]
	}
	lines := strings.SplitAfter(header, "\n")
	text := add(lines[0], "watch events per Bar") + add(lines[1], "") + add(twoRuns, "4.00")
	rows, err := ParseReport("b.md", text)
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.PeakRSS != 45.2 || r.LiveHeap != 9.1 || r.CPU != 1.3 || r.WatchLists != 3 {
		t.Errorf("with a column added: %+v", r)
	}
}

func TestParseReportErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"no table", preface, "no table"},
		{"no rows", header, "no rows"},
		{"column gone", strings.Replace(header, "| live heap ", "| heap ", 1) + twoRuns, `no column "live heap"`},
		{"cell not a number", header + strings.Replace(twoRuns, "45.2 MB", "n/a", 1), "peak RSS"},
		{"cells missing", header + "| 500 | 0 |\n", "cells"},
		{"no watches that listed", header + strings.Replace(twoRuns, "0 / 3 (3)", "0 / 3", 1), "LIST / WATCH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseReport("b.md", tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseReport: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// The header names the controller's --gc-headroom-percent since the bench
// wrote it (test/bench's buildLine); another part's header does not count.
func TestParseReportReadsTheHeadroom(t *testing.T) {
	named := strings.Replace(preface, "commit 887edd6-dirty,", "commit 887edd6-dirty, controller --gc-headroom-percent=20,", 1)
	sharded := "\nWritten by `make bench-sharded` (test/bench, `--shards`) on x, commit y, controller --gc-headroom-percent=30, go, 2 CPUs,\n"
	for _, tc := range []struct {
		text string
		want int
	}{
		{named + header + twoRuns, 20},
		// The sharded part's header first: a search of the whole text
		// would find it before the report's own.
		{sharded + preface + header + twoRuns, UnnamedHeadroom},
	} {
		rows, err := ParseReport("b.md", tc.text)
		if err != nil {
			t.Fatal(err)
		}
		if rows[0].Headroom != tc.want {
			t.Errorf("headroom %d, want %d", rows[0].Headroom, tc.want)
		}
	}
}

func TestParseGCPart(t *testing.T) {
	text := "# x\n\n" + gcPartBegin + " -->\n\n| Bars | --gc-headroom-percent | converge (÷ floor) | peak RSS | live heap | peak ÷ live | peak RSS per 1,000 Bars | CPU |\n| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |\n" +
		"| 50000 | 0 (Go's GOGC=100) | 280.0 s (1.39×) | 664.2 MB | 309.4 MB | 2.15 | 13.3 MB | 61.2 s |\n" +
		"| 50000 | 20 | 287.6 s (1.43×) | 456.1 MB | 309.4 MB | 1.47 | 9.1 MB | 88.2 s |\n\n- after\n"
	runs, err := ParseGCPart(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []GCRun{{N: 50000, Headroom: 0, LiveMiB: 309.4, CPU: 61.2}, {N: 50000, Headroom: 20, LiveMiB: 309.4, CPU: 88.2}}
	if len(runs) != len(want) || runs[0] != want[0] || runs[1] != want[1] {
		t.Errorf("ParseGCPart = %+v, want %+v", runs, want)
	}
	if _, err := ParseGCPart(header + twoRuns); err == nil {
		t.Error("a report without the GC part: want an error")
	}
}
