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
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a conversion webhook request, the "result" label.
const (
	ConversionSuccess = "success"
	// ConversionFailure: a review answered with a failure; the API server
	// fails the client's request with its message.
	ConversionFailure = "failure"
	// ConversionInvalid: not a ConversionReview, so not the API server.
	ConversionInvalid = "invalid"
)

var (
	conversionRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_conversion_webhook_requests_total",
		Help: "ConversionReviews the webhook answered, by result (success, failure, invalid).",
	}, []string{"result"})
	conversionObjects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_conversion_webhook_objects_total",
		Help: "Bars in the ConversionReviews the webhook answered, by result.",
	}, []string{"result"})
	// The API server waits for the webhook on every read of a Bar in
	// another version; its own default timeout is 10 s.
	conversionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bar_controller_conversion_webhook_request_duration_seconds",
		Help:    "How long answering one ConversionReview took, from the request's first byte read to the response written, by result.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. 13s
	}, []string{"result"})
)

func conversionCollectors() []prometheus.Collector {
	return []prometheus.Collector{conversionRequests, conversionObjects, conversionDuration}
}

// RecordConversion counts one ConversionReview of n objects and how long
// answering it took.
func RecordConversion(result string, n int, d time.Duration) {
	conversionRequests.WithLabelValues(result).Inc()
	conversionObjects.WithLabelValues(result).Add(float64(n))
	conversionDuration.WithLabelValues(result).Observe(d.Seconds())
}
