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
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBuildInfo reads the gauge as a scraper does: one series, value 1,
// each label carrying its own argument (a swapped pair would pass a test
// that only looked for the values somewhere in the output).
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(BuildInfo("v1.2.3", "0123456789abcdef", "go1.26.8"))
	rec := httptest.NewRecorder()
	Handler(reg, false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var series []string
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "bar_controller_build_info") {
			series = append(series, line)
		}
	}
	want := `bar_controller_build_info{commit="0123456789abcdef",go_version="go1.26.8",version="v1.2.3"} 1`
	if len(series) != 1 || series[0] != want {
		t.Errorf("build info series %q, want exactly [%s]", series, want)
	}
}
