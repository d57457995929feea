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

// Command flake-hunt reads the -test.v logs of runs of one test binary,
// as hack/flake-hunt.sh keeps them, and prints per test how many runs it
// passed and the spread of its duration, and per line a test logged with
// figures in it ("converged in 8.3s; TokenReviews 2000") the minimum,
// median and maximum of each figure over every run. That spread is the
// noise model a time bound in a test is derived from (how many runs, what
// spread): a bound inside it judges the machine, not the code.
//
// Usage: flake-hunt [--markdown] [--exits=0,1,...] [--title=...] run-1.log run-2.log ...
//
// It exits 1 if a run's exit status (--exits) was not 0, or, without
// --exits, if a test failed in any run.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	markdown := flag.Bool("markdown", false, "print tables for docs/measurements/gate-timing.md")
	exitList := flag.String("exits", "", "each run's exit status, comma-separated, in the order of the logs")
	title := flag.String("title", "flake-hunt", "what was run, for the report's first line")
	minRuns := flag.Int("min-runs", 1, "show only the figures logged in at least this many runs")
	flag.Parse()
	logs := flag.Args()
	if len(logs) == 0 {
		fmt.Fprintln(os.Stderr, "usage: flake-hunt [flags] run-1.log [run-2.log ...]")
		flag.PrintDefaults()
		os.Exit(2)
	}

	runs := make([]*run, len(logs))
	for i, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		runs[i], err = parseRun(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
	}
	exits, err := parseExits(*exitList, runs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	s := summarize(runs, exits)
	if *markdown {
		s.writeMarkdown(os.Stdout, *title, *minRuns)
	} else {
		s.writeText(os.Stdout, *title, *minRuns)
	}
	if len(s.failedRuns()) > 0 {
		os.Exit(1)
	}
}

// parseExits reads --exits, one status per run. Without it, a run counts
// as failed if a test failed in it (a run that crashed before printing a
// result then passes: the script always gives --exits).
func parseExits(list string, runs []*run) ([]int, error) {
	exits := make([]int, len(runs))
	if list == "" {
		for i, r := range runs {
			for _, res := range r.results {
				if res.status == "FAIL" {
					exits[i] = 1
				}
			}
		}
		return exits, nil
	}
	parts := strings.Split(list, ",")
	if len(parts) != len(runs) {
		return nil, fmt.Errorf("--exits has %d statuses for %d logs", len(parts), len(runs))
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--exits: %v", err)
		}
		exits[i] = n
	}
	return exits, nil
}
