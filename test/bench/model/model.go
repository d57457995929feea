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

// Package model predicts what bar-controller and its API server need for N
// Bars from the per-row figures of make bench's reports (docs/benchmarks.md,
// docs/benchmarks-large.md). Every figure is a line a + b·N fitted to the
// small rows, or a constant per Bar, except the two the controller's GC
// policy shapes (gc.go): peak RSS, a line in the heap goal, and controller
// CPU, a line in N scaled by the collector's extra work. Each is checked
// against the largest row, which the fit never sees (docs/sizing-model.md).
package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Row is what the model reads of one row of a report's table. Times and
// CPU are seconds, memory MiB (the reports' "MB" are 1<<20 bytes).
type Row struct {
	Report    string // the file it came from, for messages
	Commit    string // the commit the report says it measured
	N         int
	Unrelated int
	Floor     float64 // median floor
	Run       float64 // median controller run: the cold start
	// Headroom is the --gc-headroom-percent the controller ran with (the
	// report's header; UnnamedHeadroom if it does not say).
	Headroom   int
	CPU        float64 // the controller's user + system time
	PeakRSS    float64
	LiveHeap   float64
	ServerRun  float64 // API server + etcd CPU, median over the controller runs
	Server     float64 // the same over the floors
	Writes     float64 // per Bar, the bench's own Bar creates taken out
	WatchLists float64 // watches that began with a list
	// The bench's own CPU, medians over the floors and over the runs, if
	// the report has the column (HasBenchCPU): in a floor its three
	// writes per Bar, in a run its Bar creates and its convergence watch.
	HasBenchCPU          bool
	BenchFloor, BenchRun float64
	// ReportedRatio is the report's own converge ratio, 0 if it has none.
	ReportedRatio float64
}

// Line is a + b·N.
type Line struct{ A, B float64 }

// At is the line's value at n Bars.
func (l Line) At(n float64) float64 { return l.A + l.B*n }

// Solve is the N at which the line reaches y; +Inf if it never grows.
func (l Line) Solve(y float64) float64 {
	if l.B <= 0 {
		return math.Inf(1)
	}
	return (y - l.A) / l.B
}

// FitLine is the least-squares line through the points. It needs two
// distinct sizes: one size fits any slope.
func FitLine(ns, ys []float64) (Line, error) {
	if len(ns) != len(ys) {
		return Line{}, fmt.Errorf("%d sizes, %d values", len(ns), len(ys))
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ns)))) < 2 {
		return Line{}, errors.New("fewer than two distinct sizes to fit a line to")
	}
	var mn, my float64
	for i := range ns {
		mn += ns[i]
		my += ys[i]
	}
	mn /= float64(len(ns))
	my /= float64(len(ns))
	var sxy, sxx float64
	for i := range ns {
		sxy += (ns[i] - mn) * (ys[i] - my)
		sxx += (ns[i] - mn) * (ns[i] - mn)
	}
	b := sxy / sxx
	return Line{A: my - b*mn, B: b}, nil
}

// Kind says how a figure grows with N.
type Kind int

const (
	// Linear: a fixed cost and a cost per Bar, least squares.
	Linear Kind = iota
	// PerBar: the same for every N, the mean of the rows (a count per
	// Bar or per informer, fixed by the design, not by load).
	PerBar
	// HeapGoalLinear: a fixed part (runtime, binary, stacks) and the heap
	// up to its goal, a + b·HeapGoal(live), each row at its own measured
	// live heap; predicted at the live heap line's value at N.
	HeapGoalLinear
	// GCScaled: a line in N at GOGC=100, times GCCPUFactor of the live
	// heap. Each row is brought to GOGC=100 by its own factor before the
	// fit (1 for rows below 32 MiB live).
	GCScaled
)

// Figure is one measured figure the model predicts.
type Figure struct {
	Key  string // short, for tests and the command
	Name string // as the doc's tables say it
	Unit string
	Kind Kind
	Of   func(Row) float64
	// Derived figures are computed from others that are checked, and
	// are shown in the check but not held to Tolerance of their own.
	Derived bool
	// Reference figures are the floor's: the machine's speed in the run
	// they came from, measured next to every controller run so that a
	// ratio leaves the machine out. They are fitted, shown and used for
	// the ratio, but not held to Tolerance: a floor's cost per Bar has
	// moved by more than that between two floors of one row, and its
	// growth from 5,000 to 50,000 Bars was ×8.4 in one pair of reports
	// and ×12.1 in the next, while the controller's figures stayed
	// within 7 % (docs/sizing-model.md, "What the check says").
	Reference bool
}

// Figures are the figures fitted, in the order the tables show them.
var Figures = []Figure{
	{"floor", "floor (3 bare writes per Bar, median)", "s", Linear, func(r Row) float64 { return r.Floor }, false, true},
	{"run", "cold start: controller run (median)", "s", Linear, func(r Row) float64 { return r.Run }, false, false},
	{"cpu", "controller CPU", "s", GCScaled, func(r Row) float64 { return r.CPU }, false, false},
	{"rss", "controller peak RSS", "MiB", HeapGoalLinear, func(r Row) float64 { return r.PeakRSS }, false, false},
	{"heap", "controller live heap, idle", "MiB", Linear, func(r Row) float64 { return r.LiveHeap }, false, false},
	{"server", "API server + etcd CPU, controller run", "s", Linear, func(r Row) float64 { return r.ServerRun }, false, false},
	{"serverfloor", "API server + etcd CPU, floor", "s", Linear, func(r Row) float64 { return r.Server }, false, true},
	{"writes", "writes per Bar", "", PerBar, func(r Row) float64 { return r.Writes }, false, false},
	{"lists", "watches that listed (one per informer)", "", PerBar, func(r Row) float64 { return r.WatchLists }, false, false},
}

// Ratio is the converge ratio the reports' targets are about, predicted as
// the two lines' quotient rather than fitted: the ratio of two noisy
// medians is noisier than either. It is derived: two predictions each
// within Tolerance bound their quotient only to 0.85/1.15 − 1 = −26 % ...
// 1.15/0.85 − 1 = +35 %, so holding it to Tolerance too would check the
// same two figures again, more strictly.
var Ratio = Figure{"ratio", "controller run ÷ floor", "×", Linear, func(r Row) float64 { return r.Run / r.Floor }, true, false}

// Held says whether the check holds the figure to Tolerance.
func (f Figure) Held() bool { return !f.Derived && !f.Reference }

// Model is one line per figure.
type Model struct {
	Lines map[string]Line
	Rows  []Row // what it was fitted from
	// All is every row of the reports, the check's and those with
	// unrelated Deployments too (for the CPU account, account.go).
	All []Row
	// Sharded are the reports' sharded rows, and MatchNs the cost of one
	// shard selector's match their run measured (shards.go).
	Sharded []ShardedRow
	MatchNs float64
}

// Predict is the figure's value at n Bars with the shipped defaults.
func (m Model) Predict(key string, n float64) float64 {
	return m.PredictAt(key, n, GCHeadroomPercent)
}

// PredictAt is the figure's value at n Bars for a controller run with
// --gc-headroom-percent=headroom.
func (m Model) PredictAt(key string, n float64, headroom int) float64 {
	if key == Ratio.Key {
		return m.Lines["run"].At(n) / m.Lines["floor"].At(n)
	}
	l, ok := m.Lines[key]
	if !ok {
		panic("model: no figure " + key)
	}
	switch kindOf(key) {
	case HeapGoalLinear:
		return l.At(HeapGoalAt(m.Predict("heap", n), headroom))
	case GCScaled:
		return l.At(n) * GCCPUFactorAt(m.Predict("heap", n), headroom)
	}
	return l.At(n)
}

func kindOf(key string) Kind {
	for _, f := range Figures {
		if f.Key == key {
			return f.Kind
		}
	}
	return Linear
}

// Fit fits every figure to the rows.
func Fit(rows []Row) (Model, error) {
	m := Model{Lines: map[string]Line{}, Rows: rows}
	ns := make([]float64, len(rows))
	for i, r := range rows {
		ns[i] = float64(r.N)
	}
	for _, f := range Figures {
		xs, ys := slices.Clone(ns), make([]float64, len(rows))
		for i, r := range rows {
			ys[i] = f.Of(r)
			switch f.Kind {
			case HeapGoalLinear:
				xs[i] = HeapGoalAt(r.LiveHeap, r.Headroom)
			case GCScaled:
				ys[i] /= GCCPUFactorAt(r.LiveHeap, r.Headroom)
			}
		}
		switch f.Kind {
		case PerBar:
			if len(ys) == 0 {
				return Model{}, errors.New("no rows to fit")
			}
			var sum float64
			for _, y := range ys {
				sum += y
			}
			m.Lines[f.Key] = Line{A: sum / float64(len(ys))}
		default:
			l, err := FitLine(xs, ys)
			if err != nil {
				return Model{}, fmt.Errorf("%s: %w", f.Name, err)
			}
			m.Lines[f.Key] = l
		}
	}
	return m, nil
}

// Split picks, from the rows of every report, the one the model is checked
// against (the largest N with no unrelated Deployments) and the ones it is
// fitted from (every other such row, each smaller). Rows with unrelated
// Deployments answer another question and are left out.
func Split(rows []Row) (fit []Row, check Row, err error) {
	best := -1
	for i, r := range rows {
		if r.Unrelated == 0 && (best < 0 || r.N > rows[best].N) {
			best = i
		}
	}
	if best < 0 {
		return nil, Row{}, errors.New("no row without unrelated Deployments")
	}
	check = rows[best]
	for _, r := range rows {
		if r.Unrelated == 0 && r.N < check.N {
			fit = append(fit, r)
		}
	}
	return fit, check, nil
}

// Result is one figure predicted at the check row's N and measured there.
type Result struct {
	Figure    Figure
	Predicted float64
	Measured  float64
}

// Error is (predicted − measured) ÷ measured.
func (r Result) Error() float64 { return r.Predicted/r.Measured - 1 }

// Check predicts every figure, the ratio last, at the row's N and for the
// --gc-headroom-percent it was measured with.
func Check(m Model, row Row) []Result {
	var out []Result
	for _, f := range append(slices.Clone(Figures), Ratio) {
		out = append(out, Result{Figure: f, Predicted: m.PredictAt(f.Key, float64(row.N), row.Headroom), Measured: f.Of(row)})
	}
	return out
}
