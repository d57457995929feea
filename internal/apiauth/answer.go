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

package apiauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Every request the filter does not pass on is answered 401, 403 or 429,
// with the reason in the body; never 500. What a caller gets when no
// decision could be made:
//
//   - A bound of limit.go said no: 429 with Retry-After, the review was
//     never sent.
//   - The API server did not answer the review (429 or 5xx from it, no
//     answer within Options.Timeout, no connection, client-go's own rate
//     limiter out of time): 429 with Retry-After. The token is neither
//     accepted nor refused, so neither 401 nor 403 would be true, and the
//     same request may well pass a moment later: 429 is what the API
//     server itself answers under API Priority and Fairness, and what a
//     Kubernetes client already knows to retry. Its Retry-After is the
//     API server's own when it gave one. (These were answered 500 once: a
//     flood under a one-seat priority level got two. By client-go's code,
//     reviews that API Priority and Fairness rejected, which client-go
//     retried after each Retry-After until the review's timeout ended
//     them with "context deadline exceeded".)
//   - The API server answered the request with a refusal of the
//     controller's own (its ServiceAccount may not create the review, its
//     token was rejected, the API is not served): the controller cannot
//     decide, and asking again will not change that. Fail closed with the
//     answer the caller would get had the review said no, 401 for a token
//     review (as kube-rbac-proxy and k8s.io/apiserver's delegating
//     authenticator answer any authentication error) and 403 for an access
//     review (the caller is known; those two answer 500 for an authorizer
//     error, which tells a scraper nothing it can act on), and say in the
//     body that the controller, not the caller, is at fault.
//
// Bodies name the cause, never the error itself: a caller without a valid
// token must not learn the API server's address or the controller's RBAC.
// The error goes to the controller's log.

// throttledError: a review was needed and a bound of limit.go said no.
type throttledError struct {
	lane, reason string
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("too many reviews (%s lane: %s)", e.lane, e.reason)
}

// retryAfter is what a throttled caller is told: about when the
// newcomers' bucket has a token again for one address, and the least the
// API server ever asks of its own clients.
const retryAfter = time.Second

// maxRetryAfter bounds what the API server's suggestion makes the caller
// wait; API Priority and Fairness suggests at most a minute.
const maxRetryAfter = time.Minute

// failure is how a review that gave no decision is answered.
type failure struct {
	code int
	// retryAfter is sent as Retry-After if not zero.
	retryAfter time.Duration
	// why completes "could not review the token: ..." in the body.
	why string
}

// classify maps a review's error to its answer; review is "token" or
// "access". Anything it does not recognise counts as no answer (429): a
// caller retrying costs at most a review, which the bounds admit or not.
func classify(review string, err error, timeout time.Duration) failure {
	var throttled *throttledError
	if errors.As(err, &throttled) {
		return failure{code: http.StatusTooManyRequests, retryAfter: retryAfter,
			why: fmt.Sprintf("the controller sends no more reviews now (bound: %s)", throttled.reason)}
	}
	unanswered := func(why string) failure {
		wait := retryAfter
		if s, ok := apierrors.SuggestsClientDelay(err); ok {
			wait = min(max(time.Duration(s)*time.Second, retryAfter), maxRetryAfter)
		}
		return failure{code: http.StatusTooManyRequests, retryAfter: wait, why: why}
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 {
		s := status.Status()
		switch code := int(s.Code); {
		case code == http.StatusTooManyRequests:
			return unanswered("the API server is too busy to answer (429 TooManyRequests)")
		case code >= 500 || code == http.StatusRequestTimeout:
			return unanswered(fmt.Sprintf("the API server failed to answer (%d %s)", code, s.Reason))
		default:
			refused := http.StatusUnauthorized
			if review == accessReview {
				refused = http.StatusForbidden
			}
			return failure{code: refused,
				why: fmt.Sprintf("the API server refused the controller's %s review (%d %s); its RBAC or identity is at fault, see its log", review, code, s.Reason)}
		}
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return unanswered(fmt.Sprintf("the API server did not answer within %v", timeout))
	}
	return unanswered("the controller could not get an answer from the API server")
}

const (
	tokenReview  = "token"
	accessReview = "access"
)

// answer writes f, for a review of the kind named in classify.
func (f failure) answer(w http.ResponseWriter, review string) {
	if f.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(f.retryAfter/time.Second)))
	}
	what := "the token"
	if review == accessReview {
		what = "the caller's access"
	}
	http.Error(w, fmt.Sprintf("%s: could not review %s: %s", http.StatusText(f.code), what, f.why), f.code)
}
