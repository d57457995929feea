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
	"fmt"
	"strings"
)

// The bench's machine has two cores, and no run can be shorter than the
// CPU spent in it divided by two. Through a cold start the API server,
// etcd, the controller and the bench keep both cores busy, in a floor as
// in a run, so each lasts about that long, and the converge ratio (run ÷
// floor) is about the CPU ratio: all CPU over a run ÷ all CPU over a
// floor. When both are saturated that is near certain; the row's error
// says how near, and a run the controller leaves waiting (a rate limit, a
// backoff) shows as a converge ratio above its CPU ratio. On that machine
// the controller's CPU lengthens a run one for one, and the CPU ratio
// with less of it, everything else as measured, is the least converge
// ratio a cheaper controller could reach there.
//
// The windows differ a little: the API server's and the bench's CPU are
// taken from the first Bar create to convergence, the controller's over
// its whole life (its start and initial lists, and the Events it writes
// after convergence), which overstates its share in a run; most at 500
// Bars, where a run lasts 4 s.

// Account is one row's CPU account.
type Account struct {
	Row
	Ratio    float64 // converge time, run ÷ floor (medians), as the report computed it
	CPURatio float64 // (API server + etcd + controller + bench) over a run ÷ (API server + etcd + bench) over a floor
	// The CPU ratio with the controller's CPU halved, and with none.
	HalfController, NoController float64
	// ControllerPerBar is the controller's CPU per Bar, BareWritesPerBar
	// the bench's own over a floor per Bar; both in seconds.
	ControllerPerBar, BareWritesPerBar float64
	// TrafficPerBar estimates what the controller's traffic costs a
	// client in client-go, from the bench's own CPU: three writes and
	// three watch events per Bar. Over a floor the bench makes three
	// writes per Bar (F = 3w: the Bar's create, the Deployment's create,
	// the status as an update, each answered in full, and no Event);
	// over a run one write and three watch events (R = w + 3e: the Bar's
	// create and its status, JSON, and the Deployment's create,
	// protobuf), plus its bookkeeping, which grows with the run's length.
	// So 3w + 3e = R + 2F/3, if every write costs what the controller's
	// (a create, an apply and an Event, answered with metadata only)
	// cost, and every event the same. An estimate, with a yardstick that
	// moves with the machine (the bench's CPU for one floor's work
	// differs by up to 44 % within a row:
	// docs/measurements/benchmarks-controller-cost-fourth-and-fifth-steps.md).
	TrafficPerBar float64
	// TargetPerBar is the most controller CPU per Bar with which the
	// converge ratio would meet TargetRatio, the rest of the run as
	// measured and the row's converge ratio as far from its CPU ratio as
	// measured; negative when the rest alone is over it.
	TargetPerBar float64
}

// TargetRatio is issue 30's converge target: 1.35× the floor up to 5,000
// Bars, 1.5× beyond.
func TargetRatio(n int) float64 {
	if n <= 5000 {
		return 1.35
	}
	return 1.5
}

// Accounts are the accounts of the rows that have the bench's own CPU.
func Accounts(rows []Row) []Account {
	var out []Account
	for _, r := range rows {
		if !r.HasBenchCPU {
			continue
		}
		floor := r.Server + r.BenchFloor
		with := func(controller float64) float64 { return (r.ServerRun + controller + r.BenchRun) / floor }
		ratio := r.ReportedRatio
		if ratio == 0 {
			ratio = r.Run / r.Floor
		}
		// The CPU ratio that gives the target converge ratio at this
		// row's measured gap between the two.
		targetCPU := TargetRatio(r.N) * with(r.CPU) / ratio
		out = append(out, Account{
			Row:              r,
			Ratio:            ratio,
			CPURatio:         with(r.CPU),
			HalfController:   with(r.CPU / 2),
			NoController:     with(0),
			ControllerPerBar: r.CPU / float64(r.N),
			BareWritesPerBar: r.BenchFloor / float64(r.N),
			TrafficPerBar:    (r.BenchRun + 2*r.BenchFloor/3) / float64(r.N),
			TargetPerBar:     (targetCPU*floor - r.ServerRun - r.BenchRun) / float64(r.N),
		})
	}
	return out
}

// Error is how far the converge ratio is from the CPU ratio:
// (converge ratio − CPU ratio) ÷ CPU ratio.
func (a Account) Error() float64 { return a.Ratio/a.CPURatio - 1 }

// AccountMarkdown is the account's table for docs/sizing-model.md.
func AccountMarkdown(accounts []Account) string {
	var b strings.Builder
	b.WriteString("| report | Bars | unrelated | converge ratio | CPU ratio | error | CPU ratio, the controller's CPU halved | CPU ratio, no controller CPU | controller CPU per Bar | the bench's own CPU per Bar over a floor | the controller's traffic in the bench's client-go, per Bar | target | controller CPU per Bar that meets it |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, a := range accounts {
		meets := fmt.Sprintf("%.2f ms", a.TargetPerBar*1000)
		if a.TargetPerBar <= 0 {
			meets = "none: the rest is over"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %+.1f %% | %s | %s | %.2f ms | %.2f ms | %.2f ms | %s | %s |\n", a.Report, thousands(float64(a.N)), thousands(float64(a.Unrelated)),
			value(a.Ratio, "×"), value(a.CPURatio, "×"), a.Error()*100, value(a.HalfController, "×"), value(a.NoController, "×"),
			a.ControllerPerBar*1000, a.BareWritesPerBar*1000, a.TrafficPerBar*1000, value(TargetRatio(a.N), "×"), meets)
	}
	return b.String()
}
