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

package metrics

import "github.com/prometheus/client_golang/prometheus"

// BuildInfo is the bar_controller_build_info gauge: always 1, with what
// runs in its labels, as kube-state-metrics' and Prometheus's own
// build_info are. A value of 1 lets a query carry the version onto any
// other series of the same target (... * on(instance) group_left(version)
// bar_controller_build_info), and counting the label values shows a
// rollout in progress (two versions at once). The labels are fixed for the
// process's life, so they are constant labels, not a vector.
func BuildInfo(version, commit, goVersion string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_build_info",
		Help: "Always 1; its labels say which build of bar-controller runs: version, commit and Go version.",
		ConstLabels: prometheus.Labels{
			"version":    version,
			"commit":     commit,
			"go_version": goVersion,
		},
	})
	g.Set(1)
	return g
}
