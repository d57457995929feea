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

package webhookcert

import "github.com/prometheus/client_golang/prometheus"

// Results of a pass, the "result" label of the checks counter.
const (
	resultReady   = "ready"   // served and trusted
	resultWaiting = "waiting" // served, not trusted (or not for the CRD's name) yet
	resultRefused = "refused" // RefusedError: keeps nothing
	resultError   = "error"   // failed; retried
)

// What a fight between replicas would show: writes that never stop, and
// a bundle that grows. Settled replicas count checks and nothing else.
var (
	checksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_conversion_webhook_certificate_checks_total",
		Help: "Passes of the conversion webhook's certificate keeper (each reads the CRD and the Secret), by result (ready, waiting, refused, error).",
	}, []string{"result"})
	writesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_conversion_webhook_certificate_writes_total",
		Help: "Writes the conversion webhook's certificate keeper made and the API server accepted, by object (secret, crd).",
	}, []string{"object"})
	bundleSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_conversion_webhook_ca_bundle_certificates",
		Help: "CA certificates in the CRD's conversion caBundle, as the certificate keeper's last pass read it.",
	})
)

// Collectors are the keeper's metrics, for the controller's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{checksTotal, writesTotal, bundleSize}
}
