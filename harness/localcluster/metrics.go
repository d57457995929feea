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

package localcluster

import (
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus endpoint, by metric family name.
type Metrics map[string]*dto.MetricFamily

// Scrape reads the Prometheus text format from url with client; token, if
// set, is sent as a bearer token.
func Scrape(client *http.Client, url, token string) (Metrics, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return Metrics(families), nil
}

// Value sums the counters, gauges, or histograms' and summaries' sample
// counts of the series named name whose labels include match; found is
// false if there are none (a vector that was never incremented).
func (m Metrics) Value(name string, match map[string]string) (total float64, found bool) {
	f := m[name]
	if f == nil {
		return 0, false
	}
next:
	for _, metric := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range metric.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case metric.Counter != nil:
			total += metric.GetCounter().GetValue()
		case metric.Gauge != nil:
			total += metric.GetGauge().GetValue()
		case metric.Untyped != nil:
			total += metric.GetUntyped().GetValue()
		case metric.Histogram != nil:
			total += float64(metric.GetHistogram().GetSampleCount())
		case metric.Summary != nil:
			total += float64(metric.GetSummary().GetSampleCount())
		}
		found = true
	}
	return total, found
}
