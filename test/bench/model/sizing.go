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

import "math"

// Tolerance is how far a prediction may miss the measured check row: the
// issue's 15 %. The memory rule below adds it to the predicted peak, so
// that a limit sized from the model holds a peak it underestimated by
// that much.
const Tolerance = 0.15

// GOMEMLIMIT is set to this share of the container's memory limit, as the
// controller sets it from the limit the shipped Deployment gives it
// (internal/memory.SoftLimit): the limit also counts what the Go runtime
// does not manage.
const gomemlimitShare = 0.9

// limitStep is what a memory limit is rounded up to.
const limitStep = 256 // MiB

// Needs is what a cluster needs for N Bars, by the model.
type Needs struct {
	N int
	// What the bench would measure: a cold start of N new Bars on its
	// machine (2 cores shared by the controller, the API server, etcd).
	ColdStart     float64 // s
	ControllerCPU float64 // CPU-seconds of the controller over it
	ServerCPU     float64 // CPU-seconds of the API server and etcd over it
	PeakRSS       float64 // MiB, no memory limit, the controller's own GOGC (gc.go)
	LiveHeap      float64 // MiB, converged and idle
	// What to give the controller's container.
	Limit      float64 // MiB, a multiple of limitStep
	GOMEMLIMIT float64 // MiB
}

// Size is the model's Needs at n Bars.
func Size(m Model, n int) Needs {
	x := float64(n)
	peak := m.Predict("rss", x)
	return Needs{
		N:             n,
		ColdStart:     m.Predict("run", x),
		ControllerCPU: m.Predict("cpu", x),
		ServerCPU:     m.Predict("server", x),
		PeakRSS:       peak,
		LiveHeap:      m.Predict("heap", x),
		Limit:         limitFor(peak),
		GOMEMLIMIT:    math.Floor(limitFor(peak) * gomemlimitShare),
	}
}

// limitFor is the smallest limit, in steps of limitStep, whose GOMEMLIMIT
// share holds the peak and the model's tolerance over it.
func limitFor(peak float64) float64 {
	return math.Ceil(peak*(1+Tolerance)/gomemlimitShare/limitStep) * limitStep
}

// BarsForLimit is the largest N whose Needs fit a memory limit of mib.
func BarsForLimit(m Model, mib float64) float64 {
	return solve(m, "rss", mib*gomemlimitShare/(1+Tolerance))
}

// solve is the N at which the figure reaches y: +Inf if it does not by
// maxBars, 0 if it is there already. Peak RSS and controller CPU are not
// lines in N but are monotone in it (HeapGoal never drops, GCCPUFactor
// only grows with the live heap), so bisection finds where they cross y.
func solve(m Model, key string, y float64) float64 {
	const maxBars = 1e9
	at := func(n float64) float64 { return m.Predict(key, n) }
	if at(0) >= y {
		return 0
	}
	if at(maxBars) < y {
		return math.Inf(1)
	}
	lo, hi := 0.0, maxBars
	for hi-lo > 1e-6*max(1, lo) {
		mid := (lo + hi) / 2
		if at(mid) <= y {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// BarsForTime is the N whose figure (a time or CPU-seconds line) reaches
// secs: with "run", the cold start on the bench's machine; with "cpu",
// the controller's own CPU, which is a cold start's lower bound when the
// controller has one core (the shipped limit, cpu: 1) and the API server
// never makes it wait.
func BarsForTime(m Model, key string, secs float64) float64 {
	return solve(m, key, secs)
}

// PerCoreRate is how many Bars a second one core can take through a cold
// start, by a CPU line's cost per Bar: the controller's ("cpu") or the API
// server's and etcd's ("server"). The controller's is at the GOGC of a
// large controller, GCHeadroomPercent, which it runs at from about
// 25,000 Bars on.
func PerCoreRate(m Model, key string) float64 {
	b := m.Lines[key].B
	if kindOf(key) == GCScaled {
		b *= gcFactor(GCHeadroomPercent)
	}
	if b <= 0 {
		return math.Inf(1)
	}
	return 1 / b
}
