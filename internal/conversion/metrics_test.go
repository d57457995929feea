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

package conversion

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// Every review the webhook answers is counted by result, with its objects
// and its duration: a converted list, a refused conversion, and a request
// that is no ConversionReview at all.
func TestServeHTTPRecordsMetrics(t *testing.T) {
	h := metrics.Handler(metrics.NewRegistry(), false)
	scrape := func() map[string]float64 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		out := map[string]float64{}
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), " ")
			if !ok || !strings.HasPrefix(name, "bar_controller_conversion_webhook_") {
				continue
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			out[name] = v
		}
		return out
	}
	before := scrape()
	c := NewConverter()
	review(t, c, "barcontroller.dev/v1", alphaBar, alphaBar)
	review(t, c, "barcontroller.dev/v2", alphaBar)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	after := scrape()
	for name, want := range map[string]float64{
		`bar_controller_conversion_webhook_requests_total{result="success"}`:                 1,
		`bar_controller_conversion_webhook_objects_total{result="success"}`:                  2,
		`bar_controller_conversion_webhook_requests_total{result="failure"}`:                 1,
		`bar_controller_conversion_webhook_objects_total{result="failure"}`:                  1,
		`bar_controller_conversion_webhook_requests_total{result="invalid"}`:                 1,
		`bar_controller_conversion_webhook_request_duration_seconds_count{result="success"}`: 1,
	} {
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s went up by %v, want %v", name, got, want)
		}
	}
}
