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

// Command bench measures bar-controller on a real control plane (etcd and
// kube-apiserver from bin/k8s-<version>/, no kube-controller-manager):
// how long N Bars take to converge against a floor measured in the same run,
// how many writes each Bar costs by the API server's own counters, whether
// an idle controller writes, and the controller's peak memory and CPU,
// also with thousands of unrelated Deployments in the cluster; beside it,
// in the same rows, a controller-runtime peer doing the same job
// (peer.go); and at one size the steady state: a restart over converged
// Bars, the latency of spec changes and deleted Deployments under churn,
// an API server restart (steady.go). It prints a table and writes
// docs/benchmarks.md and a plot (make bench). Other modes measure shards
// (sharded.go) and the GC headroom (gcheadroom.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	var (
		ns         = flag.String("n", "500,2000,5000", "comma-separated numbers of Bars, one scenario each")
		unrelated  = flag.Int("unrelated", 5000, "unrelated Deployments for the extra scenario at --unrelated-n Bars; 0 skips it")
		unrelatedN = flag.Int("unrelated-n", 2000, "number of Bars in the scenario with unrelated Deployments")
		binDir     = flag.String("bin-dir", os.Getenv("KUBE_BIN_DIR"), "directory with etcd and kube-apiserver (hack/install-k8s-binaries.sh)")
		controller = flag.String("controller", "bin/bar-controller", "the bar-controller binary to measure, run with its default flags")
		crdDir     = flag.String("crds", "artifacts/crd", "the Bar CRD")
		inflight   = flag.Int("inflight", 64, "requests the bench's own client keeps in flight (floor and Bar creates alike)")
		idle       = flag.Duration("idle-resync", 5*time.Second, "the resync period of the idle check's controller")
		out        = flag.String("out", "docs/benchmarks.md", "the report to write; empty: print only")
		logDir     = flag.String("log-dir", "_output/bench", "where the controllers' logs go")
		split      = flag.Int("breakdown", 0, "instead of the scenarios: with this many Bars, the API server CPU of the floor and of variants that each add one of the controller's differences (breakdown.go); prints a table")
		rounds     = flag.Int("breakdown-rounds", 3, "rounds of --breakdown, its variants interleaved")
		runs       = flag.Int("runs", 2, "controller runs per scenario, each between two floors (so runs+1 floors)")
		apfN       = flag.Int("apf", 500, "Bars of the scenario where API Priority and Fairness gives the controller one seat (apf.go), the shipped controller against 4 fixed workers; 0 skips it")
		cpuProf    = flag.Duration("cpu-profile", 0, "if set, a CPU profile of each controller run this long from its first Bar create, written next to its log as cpu-<Bars>-<unrelated>-run<i>.pb.gz (for go tool pprof)")
		apiProf    = flag.Bool("apiserver-profile", false, "with --cpu-profile: profile the API server instead, over each floor and each controller run alike, as apiserver-cpu-<Bars>-<unrelated>-floor<i>.pb.gz and apiserver-cpu-<Bars>-<unrelated>-run<i>.pb.gz; a profile lasts --cpu-profile whatever the window, so keep it no longer than the shortest floor, or it covers what follows (idle time after a floor; the Events wait and the heap profile after a run)")
		observe    = flag.Bool("observe-floors", false, "each floor carries the bench's convergence watch and ends when it has seen every Bar done, as a controller run does, so that the ratio leaves out what the watch costs; prints the table only (the reports' floors carry no watch)")
		shardsN    = flag.Int("shards", 0, "instead of the scenarios: with more than 1, per size one floor and then one cold start per --replicas count, each replica with --shards=this (sharded.go), on an API server with ShardedListAndWatch on; writes only the report's sharded part")
		replicaSet = flag.String("replicas", "1,3", "with --shards: comma-separated replica counts, one cold start each")
		churnN     = flag.Int("churn-n", 2000, "the row (without unrelated Deployments) that ends with the steady step: a restart over its converged Bars, then --churn-for of spec changes at each --churn-rates and of Deployment deletes at the first rate, then an API server restart (steady.go); 0 skips it")
		churnFor   = flag.Duration("churn-for", time.Minute, "how long each churn phase changes Bars")
		churnRates = flag.String("churn-rates", "20,100", "comma-separated changes per second, one churn phase each")
		gcValues   = flag.String("gc-headroom", "", "instead of the scenarios: per size one floor and then one cold start per comma-separated --gc-headroom-percent value (0: Go's GOGC=100), their peak RSS against their live heap (gcheadroom.go); writes only the report's GC headroom part")
		peer       = flag.String("peer", "", "the controller-runtime peer's binary (test/bench/peer, make bench builds it), run beside the controller in every row of no unrelated Deployments, against the same floors (peer.go); empty: none")
		ctlArgs    = flag.String("controller-args", "", "space-separated flags added to the controller's (say --adaptive-concurrency=false --workers=4, to compare with the fixed number); the report names them")
	)
	flag.Parse()
	if *binDir == "" {
		fmt.Fprintln(os.Stderr, "bench: set --bin-dir or $KUBE_BIN_DIR (make bench does)")
		os.Exit(2)
	}
	var sizes []int
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: --n: bad number %q\n", f)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	if err := os.MkdirAll(*logDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	controllerPath, _ := filepath.Abs(*controller)
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "bench: --runs must be at least 1")
		os.Exit(2)
	}
	rates, err := parseCounts(*churnRates)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: --churn-rates:", err)
		os.Exit(2)
	}
	peerPath := *peer
	if peerPath != "" {
		peerPath, _ = filepath.Abs(peerPath)
	}
	s := scenario{peer: peerPath, churnN: *churnN, churnFor: *churnFor, churnRates: rates, binDir: *binDir, crdDir: *crdDir, controller: controllerPath, inflight: *inflight, idleResync: *idle, logDir: *logDir, rounds: *runs, cpuProfile: *cpuProf, apiServerProfile: *apiProf,
		observeFloors: *observe, extraArgs: strings.Fields(*ctlArgs)}
	// What the reports name as measured, taken before the runs: the
	// working tree may change while they last.
	build, err := buildLine(s.controller, s.extraArgs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}

	if *gcValues != "" {
		if err := runGC(ctx, s, sizes, *gcValues, *out, describe()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: GC headroom:", err)
			os.Exit(1)
		}
		return
	}

	if *shardsN > 1 {
		if err := runSharded(ctx, s, sizes, *shardsN, *replicaSet, *out, build); err != nil {
			fmt.Fprintln(os.Stderr, "bench: sharded:", err)
			os.Exit(1)
		}
		return
	}

	if *split > 0 {
		table, err := breakdown(ctx, s, *split, *rounds)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: breakdown:", err)
			os.Exit(1)
		}
		fmt.Print(table)
		return
	}

	if *apiProf && *cpuProf <= 0 {
		fmt.Fprintln(os.Stderr, "bench: --apiserver-profile needs --cpu-profile (how long each profile lasts)")
		os.Exit(2)
	}
	if *cpuProf > 0 && *out != "" {
		fmt.Fprintf(os.Stderr, "bench: --cpu-profile: printing the table only, not writing %s\n", *out)
		*out = ""
	}
	if *observe && *out != "" {
		fmt.Fprintf(os.Stderr, "bench: --observe-floors: printing the table only, not writing %s\n", *out)
		*out = ""
	}
	if *ctlArgs != "" && *out != "" {
		// docs/benchmarks.md is the shipped defaults' report.
		fmt.Fprintf(os.Stderr, "bench: --controller-args %q: printing the table only, not writing %s\n", *ctlArgs, *out)
		*out = ""
	}
	var results []result
	var failed []string
	plan := make([][2]int, 0, len(sizes)+1)
	for _, n := range sizes {
		plan = append(plan, [2]int{n, 0})
	}
	if *unrelated > 0 {
		plan = append(plan, [2]int{*unrelatedN, *unrelated})
	}
	for _, p := range plan {
		fmt.Fprintf(os.Stderr, "bench: %d Bars, %d unrelated Deployments ...\n", p[0], p[1])
		r, err := s.run(ctx, p[0], p[1])
		if err != nil {
			// The other rows still stand; the report names the one that
			// failed, and the bench exits non-zero after writing it.
			failed = append(failed, fmt.Sprintf("%d Bars, %d unrelated: failed: %v", p[0], p[1], err))
			fmt.Fprintf(os.Stderr, "bench: %d Bars: %v\n", p[0], err)
			if ctx.Err() != nil {
				os.Exit(1)
			}
			continue
		}
		fmt.Fprintf(os.Stderr, "bench:   floors %v, controller runs %v (medians %.2fx), Events written %v after convergence, %.2f writes per Bar, idle writes %v, peak RSS %.1f MB, live heap %.1f MB\n",
			r.Floors, r.Controllers, ratio(r), r.EventsAfter,
			r.DeploymentWrites+r.StatusWrites+r.EventWrites+r.OtherWrites, r.IdleWrites, mb(r.PeakRSS), mb(r.Heap.Live))
		results = append(results, r)
	}
	var apf *apfResult
	if *apfN > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d Bars under a one-seat priority level ...\n", *apfN)
		r, err := s.apf(ctx, *apfN)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: APF: %v\n", err)
			os.Exit(1)
		}
		apf = &r
	}
	table := markdownTable(results)
	if *observe {
		// Not the reports' floors: say so next to the table.
		fmt.Println("Floors carry the bench's convergence watch and end when it has seen every Bar done (--observe-floors).")
		fmt.Println()
	}
	fmt.Println(table)
	fmt.Print(peerSection(results), steadySection(results, *churnFor))
	if apf != nil {
		fmt.Println(apfTable(*apf))
		fmt.Println(apfTarget(*apf))
	}
	if *out == "" {
		if len(failed) > 0 {
			os.Exit(1)
		}
		return
	}
	plot := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".png"
	if err := writePlot(plot, results); err != nil {
		fmt.Fprintln(os.Stderr, "bench: plot:", err)
		os.Exit(1)
	}
	doc := report(results, failed, apf, table, filepath.Base(plot), build, *unrelatedN, *inflight, *runs, *idle) +
		peerSection(results) + steadySection(results, *churnFor)
	// The sharded and GC headroom parts are their benches': keep them as
	// they were.
	if old, err := os.ReadFile(*out); err == nil {
		if part, ok := shardedPart(string(old)); ok {
			doc = spliceSharded(doc, part)
		}
		if part, ok := partOf(string(old), gcBegin, gcEnd); ok {
			doc = splicePart(doc, gcBegin, gcEnd, part)
		}
	}
	if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s and %s\n", *out, plot)
	if len(failed) > 0 {
		os.Exit(1)
	}
}

// runSharded is --shards: per size, the sharded bench, its table printed
// and, with out set, written as out's sharded part.
func runSharded(ctx context.Context, s scenario, sizes []int, shards int, replicaSet, out, build string) error {
	var replicas []int
	for _, f := range strings.Split(replicaSet, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 1 {
			return fmt.Errorf("--replicas: bad count %q", f)
		}
		replicas = append(replicas, r)
	}
	if len(sizes) != 1 {
		return fmt.Errorf("--shards takes one size in --n, not %d", len(sizes))
	}
	fmt.Fprintf(os.Stderr, "bench: %d Bars, %d shards over %v replicas ...\n", sizes[0], shards, replicas)
	res, err := s.sharded(ctx, sizes[0], shards, replicas)
	if err != nil {
		return err
	}
	table := shardedTable(res)
	fmt.Println(table)
	if out == "" {
		return nil
	}
	old, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(spliceSharded(string(old), shardedSection(res, table, build, s.inflight))), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote the sharded part of %s\n", out)
	return nil
}

// parseCounts parses a comma-separated list of positive integers.
func parseCounts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runGC is --gc-headroom: per size, the cold starts, their table printed
// and, with out set, written as out's GC headroom part.
func runGC(ctx context.Context, s scenario, sizes []int, list, out, commit string) error {
	var values []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || v > 100 {
			return fmt.Errorf("--gc-headroom: bad value %q (0 to 100)", f)
		}
		values = append(values, v)
	}
	shipped, err := shippedHeadroom(s.controller)
	if err != nil {
		return err
	}
	var rs []gcResult
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "bench: %d Bars, --gc-headroom-percent %v ...\n", n, values)
		r, err := s.gcHeadroom(ctx, n, values)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	section := gcSection(rs, shipped, commit)
	fmt.Print(section)
	if out == "" {
		return nil
	}
	old, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(splicePart(string(old), gcBegin, gcEnd, section)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote the GC headroom part of %s\n", out)
	return nil
}
