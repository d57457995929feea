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

import (
	"crypto/x509"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The conversion webhook's serving certificate is rotated a month before it
// ends (internal/webhookcert); a replica whose rotation keeps failing says
// so only in its log, until the API server can no longer call it. Its
// expiry, exported, lets an alert say it weeks before
// (artifacts/monitoring, BarControllerWebhookCertificateNotRotated).
var certificateExpiry = prometheus.NewDesc(
	"bar_controller_conversion_webhook_certificate_expiry_timestamp_seconds",
	"When the serving certificate the conversion webhook serves now expires, in seconds since the epoch; absent while none is served.",
	nil, nil)

// servedCertificate returns the certificate the webhook serves, or nil.
var servedCertificate atomic.Pointer[func() *x509.Certificate]

// SetConversionCertificateSource tells the metrics how to read the
// certificate the webhook serves; nil when it stops serving.
func SetConversionCertificateSource(f func() *x509.Certificate) {
	if f == nil {
		servedCertificate.Store(nil)
		return
	}
	servedCertificate.Store(&f)
}

// certificateCollector reads the certificate at each scrape rather than
// keeping a gauge: the value is never older than the pair being served, and
// a replica that serves none (no webhook, or before its first pair) exports
// no series, where a gauge would say the certificate expired in 1970.
type certificateCollector struct{}

func (certificateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certificateExpiry }

func (certificateCollector) Collect(ch chan<- prometheus.Metric) {
	f := servedCertificate.Load()
	if f == nil {
		return
	}
	if c := (*f)(); c != nil {
		ch <- prometheus.MustNewConstMetric(certificateExpiry, prometheus.GaugeValue, float64(c.NotAfter.Unix()))
	}
}
