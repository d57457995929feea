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

// What the metrics endpoint's authorization (internal/apiauth) costs the
// API server, and what it spared it: a flood of bogus tokens shows up as
// throttled requests, not as reviews.

// The "review" label: which review a request needed.
const (
	AuthTokenReview  = "token"
	AuthAccessReview = "access"
)

// The "reason" label of bar_controller_metrics_auth_throttled_total.
const (
	// AuthThrottledClient: the caller's address spent its own bucket.
	AuthThrottledClient = "client_rate"
	// AuthThrottledRate: the lane's bucket is empty.
	AuthThrottledRate = "rate"
	// AuthThrottledInFlight: the lane has its maximum of reviews waiting
	// for the API server.
	AuthThrottledInFlight = "in_flight"
	// AuthThrottledIdentity: the caller's identity spent its own bucket, or
	// has its maximum of reviews in flight (returning and access lanes).
	AuthThrottledIdentity = "identity"
)

var (
	authReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_metrics_auth_reviews_total",
		Help: "Reviews the metrics endpoint sent to the API server, by review (token, access), lane (newcomers, rotating, returning, access) and result (allowed, denied, error).",
	}, []string{"review", "lane", "result"})
	authThrottled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_metrics_auth_throttled_total",
		Help: "Requests to the metrics endpoint answered 429 instead of sending a review, by review, lane (newcomers, rotating, returning, access) and reason (client_rate, identity, rate, in_flight).",
	}, []string{"review", "lane", "reason"})
	authReused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_metrics_auth_reused_total",
		Help: "Requests to the metrics endpoint answered without a review of their own, by review and source (cache: a remembered answer; shared: an identical review already in flight).",
	}, []string{"review", "source"})
)

func authCollectors() []prometheus.Collector {
	return []prometheus.Collector{authReviews, authThrottled, authReused}
}

// RecordAuthReview counts one review sent to the API server.
func RecordAuthReview(review, lane, result string) {
	authReviews.WithLabelValues(review, lane, result).Inc()
}

// RecordAuthThrottled counts one request answered 429.
func RecordAuthThrottled(review, lane, reason string) {
	authThrottled.WithLabelValues(review, lane, reason).Inc()
}

// RecordAuthReused counts one request answered from the cache ("cache") or
// by a review another request had in flight ("shared").
func RecordAuthReused(review, source string) {
	authReused.WithLabelValues(review, source).Inc()
}
