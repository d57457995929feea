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
	"math"
	"slices"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestFitLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ns, ys  []float64
		want    Line
		wantErr bool
	}{
		{name: "exact", ns: []float64{500, 2000, 5000}, ys: []float64{3, 9, 21}, want: Line{A: 1, B: 0.004}},
		// Noise symmetric about a line leaves the line.
		{name: "noise cancels", ns: []float64{1000, 1000, 3000, 3000}, ys: []float64{9, 11, 29, 31}, want: Line{A: 0, B: 0.01}},
		// Two rows at one size, as the two reports' 5,000s, weigh twice.
		{name: "repeated size", ns: []float64{0, 10, 10}, ys: []float64{0, 8, 12}, want: Line{A: 0, B: 1}},
		{name: "one size", ns: []float64{5000, 5000}, ys: []float64{1, 2}, wantErr: true},
		{name: "no rows", wantErr: true},
		{name: "lengths differ", ns: []float64{1, 2}, ys: []float64{1}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FitLine(tc.ns, tc.ys)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("FitLine = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !near(got.A, tc.want.A) || !near(got.B, tc.want.B) {
				t.Errorf("FitLine = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLineSolve(t *testing.T) {
	l := Line{A: 40, B: 0.015}
	if n := l.Solve(l.At(123456)); !near(n, 123456) {
		t.Errorf("Solve(At(123456)) = %v", n)
	}
	if n := (Line{A: 3}).Solve(4); !math.IsInf(n, 1) {
		t.Errorf("a flat line reaches 4 at %v, want never (+Inf)", n)
	}
}

// row is a row whose every figure lies on a known curve of the model's
// shapes, so that a fit from such rows must give those curves back: peak
// RSS a line in the heap goal, CPU a line scaled by the GC factor. At
// 5,000 Bars its live heap (40 MiB) runs at GOGC=80, as a real one does.
func row(n int) Row {
	x := float64(n)
	live := 5 + 0.007*x
	return Row{Report: "r.md", N: n, Floor: 1 + 0.005*x, Run: 2 + 0.008*x, CPU: 0.002 * x * GCCPUFactor(live), PeakRSS: 30 + 1.1*HeapGoal(live),
		LiveHeap: live, ServerRun: 0.014 * x, Server: 0.010 * x, Writes: 3, WatchLists: 3, Headroom: GCHeadroomPercent}
}

func TestFitRecoversLines(t *testing.T) {
	m, err := Fit([]Row{row(500), row(2000), row(5000)})
	if err != nil {
		t.Fatal(err)
	}
	truth := row(500000)
	for _, f := range slices.Concat(Figures, []Figure{Ratio}) {
		if got, want := m.Predict(f.Key, 500000), f.Of(truth); !near(got, want) {
			t.Errorf("%s at 500,000 = %v, want %v", f.Name, got, want)
		}
	}
}

func TestCheckFlagsOnlyTheFigureThatMisses(t *testing.T) {
	m, err := Fit([]Row{row(500), row(2000), row(5000)})
	if err != nil {
		t.Fatal(err)
	}
	measured := row(50000)
	measured.PeakRSS *= 1.2 // the model underestimates it by a sixth
	measured.Run *= 1.2     // and the run: only the ratio, derived, shows it too
	for _, r := range Check(m, measured) {
		if !r.Figure.Held() {
			continue
		}
		missed := math.Abs(r.Error()) > Tolerance
		if missed != (r.Figure.Key == "rss" || r.Figure.Key == "run") {
			t.Errorf("%s: predicted %v, measured %v, error %+.3f: missed = %v", r.Figure.Name, r.Predicted, r.Measured, r.Error(), missed)
		}
	}
}

func TestSplit(t *testing.T) {
	with := row(2000)
	with.Unrelated = 5000
	rows := []Row{row(500), row(50000), with, row(5000), row(2000), row(100000)}
	rows[5].Unrelated = 1 // the largest, but with unrelated Deployments
	fit, check, err := Split(rows)
	if err != nil {
		t.Fatal(err)
	}
	if check.N != 50000 {
		t.Errorf("checked against %d Bars, want 50000", check.N)
	}
	var ns []int
	for _, r := range fit {
		ns = append(ns, r.N)
	}
	if len(ns) != 3 || ns[0] != 500 || ns[1] != 5000 || ns[2] != 2000 {
		t.Errorf("fitted from %v, want [500 5000 2000]", ns)
	}
	if _, _, err := Split([]Row{with}); err == nil {
		t.Error("Split of rows that all have unrelated Deployments: no error")
	}
}

func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		peak, want float64
	}{
		// The measured 50,000-Bar peak gives the shipped 1Gi.
		{766.8, 1024},
		{784, 1024},
		// 1024 × 0.9 ÷ 1.15 = 801.4 is the most 1Gi holds.
		{801, 1024},
		{802, 1280},
		{7487, 9728},
	} {
		if got := limitFor(tc.peak); got != tc.want {
			t.Errorf("limitFor(%v) = %v, want %v", tc.peak, got, tc.want)
		}
	}
	m, err := Fit([]Row{row(500), row(2000), row(5000)})
	if err != nil {
		t.Fatal(err)
	}
	// The Bars a limit holds and the limit those Bars need agree.
	for _, n := range []int{50000, 100000, 500000} {
		s := Size(m, n)
		if s.GOMEMLIMIT < s.PeakRSS*(1+Tolerance) || s.GOMEMLIMIT > s.Limit*gomemlimitShare {
			t.Errorf("%d Bars: GOMEMLIMIT %v for a peak of %v under a limit of %v", n, s.GOMEMLIMIT, s.PeakRSS, s.Limit)
		}
		if held := BarsForLimit(m, s.Limit); held < float64(n) {
			t.Errorf("%d Bars need a limit of %v MiB, which holds only %v", n, s.Limit, held)
		}
		if held := BarsForLimit(m, s.Limit-limitStep); held >= float64(n) {
			t.Errorf("%d Bars: a limit of %v MiB would do, Size gave %v", n, s.Limit-limitStep, s.Limit)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{thousands(500000), "500,000"},
		{thousands(999), "999"},
		{thousands(-1234), "-1,234"},
		{about(212576.4), "213,000"},
		{about(64624), "64,600"},
		{about(71.3), "71"},
		{quantity(1024), "1Gi"},
		{quantity(9728), "9728Mi"},
		{value(707.1, "s"), "707 s (12 min)"},
		{value(102.46, "s"), "102.5 s"},
		{value(1529, "MiB"), "1,529 MiB (1.5 GiB)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSplice(t *testing.T) {
	doc := "# Title\n\nprose\n\n" + Begin + "\n\nold\n" + End + "\n\nmore prose\n"
	got, err := Splice(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Title\n\nprose\n\n" + Begin + "\n\nnew table\n\n" + End + "\n\nmore prose\n"; got != want {
		t.Errorf("Splice = %q, want %q", got, want)
	}
	if g, err := Generated(got); err != nil || g != "new table\n" {
		t.Errorf("Generated = %q, %v", g, err)
	}
	if _, err := Splice("no markers", "x"); err == nil || !strings.Contains(err.Error(), "no generated part") {
		t.Errorf("Splice without markers: %v", err)
	}
}

// TestOnlyTheFloorIsReference guards the check's reach: a controller
// figure marked reference would drop out of the check unnoticed.
func TestOnlyTheFloorIsReference(t *testing.T) {
	for _, f := range Figures {
		if want := f.Key == "floor" || f.Key == "serverfloor"; f.Reference != want {
			t.Errorf("%s: reference %v, want %v", f.Name, f.Reference, want)
		}
	}
}

// A row measured at another headroom is fitted and checked at its own:
// the same controller at 50 has a higher peak and spends less CPU at
// 50,000 Bars, and the check must not call that a miss.
func TestCheckIsAtTheRowsHeadroom(t *testing.T) {
	m, err := Fit([]Row{row(500), row(2000), row(5000)})
	if err != nil {
		t.Fatal(err)
	}
	at50 := row(50000)
	live := at50.LiveHeap
	at50.Headroom = 50
	at50.CPU = 0.002 * 50000 * GCCPUFactorAt(live, 50)
	at50.PeakRSS = 30 + 1.1*HeapGoalAt(live, 50)
	for _, r := range Check(m, at50) {
		if r.Figure.Held() && !near(r.Predicted, r.Measured) {
			t.Errorf("%s: predicted %v at --gc-headroom-percent=50, measured %v", r.Figure.Name, r.Predicted, r.Measured)
		}
	}
	if HeapGoalAt(live, 50) <= HeapGoal(live) || GCCPUFactorAt(live, 50) >= GCCPUFactor(live) {
		t.Fatalf("at %v MiB live, 50 and the shipped %d give the same goal and factor: the test proves nothing", live, GCHeadroomPercent)
	}
}
