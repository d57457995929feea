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
	"testing"
	"time"
)

// The expiry is read at each scrape: absent without a webhook, absent
// while the webhook has no pair yet, the served pair's end once it has
// one, the new pair's after a rotation, and absent again once it stops.
func TestCertificateExpiry(t *testing.T) {
	reg := NewRegistry()
	const name = "bar_controller_conversion_webhook_certificate_expiry_timestamp_seconds"
	expiry := func() (float64, bool) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				if len(f.GetMetric()) != 1 {
					t.Fatalf("%d series of %s, want one", len(f.GetMetric()), name)
				}
				return f.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	t.Cleanup(func() { SetConversionCertificateSource(nil) })

	if v, ok := expiry(); ok {
		t.Fatalf("no webhook, yet %s is %v", name, v)
	}
	var served *x509.Certificate
	SetConversionCertificateSource(func() *x509.Certificate { return served })
	if v, ok := expiry(); ok {
		t.Fatalf("no certificate served yet, yet %s is %v", name, v)
	}
	for _, end := range []time.Time{
		time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2030, 4, 2, 3, 4, 5, 0, time.UTC), // rotated
	} {
		served = &x509.Certificate{NotAfter: end}
		if v, ok := expiry(); !ok || v != float64(end.Unix()) {
			t.Errorf("serving a certificate ending %v: %s %v (exported: %v), want %d", end, name, v, ok, end.Unix())
		}
	}
	SetConversionCertificateSource(nil)
	if v, ok := expiry(); ok {
		t.Errorf("the webhook stopped, yet %s is %v", name, v)
	}
}
