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
	"sync"
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
	// ConversionTooLarge: a body over the webhook's limit, answered 413.
	ConversionTooLarge = "too_large"
	// ConversionBusy: the requests in flight hold the webhook's budget,
	// or the caller's address its share of it; answered 429, unread.
	ConversionBusy = "busy"
)

var (
	conversionRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_conversion_webhook_requests_total",
		Help: "Requests the conversion webhook answered, by result (success, failure, invalid, too_large, busy).",
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
	// What callers made the webhook read and hold: with the results
	// above, what a flood cost a replica (internal/conversion/limit.go).
	conversionBytesRead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bar_controller_conversion_webhook_request_bytes_total",
		Help: "Bytes of request bodies the conversion webhook read, counted as they arrive.",
	})
	conversionReserved = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_conversion_webhook_reserved_bytes",
		Help: "Bytes the conversion webhook's requests in flight have reserved (their Content-Length, at least 16 KiB each).",
	})
	conversionReservedMax = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bar_controller_conversion_webhook_reserved_bytes_max",
		Help: "The most bytes the conversion webhook's requests in flight have reserved at once since the process started.",
	})
)

func conversionCollectors() []prometheus.Collector {
	return []prometheus.Collector{conversionRequests, conversionObjects, conversionDuration,
		conversionBytesRead, conversionReserved, conversionReservedMax}
}

// AddConversionBytesRead counts n bytes of a request body read.
func AddConversionBytesRead(n int) {
	conversionBytesRead.Add(float64(n))
}

// SetConversionReserved records the bytes reserved by the requests in
// flight, and the most ever: a sampled gauge would miss a flood's peak,
// which is what bounds the replica's memory.
func SetConversionReserved(n int64) {
	conversionReserved.Set(float64(n))
	reservedMaxMu.Lock()
	defer reservedMaxMu.Unlock()
	if n > reservedMax {
		reservedMax = n
		conversionReservedMax.Set(float64(n))
	}
}

var (
	reservedMaxMu sync.Mutex
	reservedMax   int64
)

// RecordConversion counts one ConversionReview of n objects and how long
// answering it took.
func RecordConversion(result string, n int, d time.Duration) {
	conversionRequests.WithLabelValues(result).Inc()
	conversionObjects.WithLabelValues(result).Add(float64(n))
	conversionDuration.WithLabelValues(result).Observe(d.Seconds())
}
