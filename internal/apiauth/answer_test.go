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
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	core "k8s.io/client-go/testing"
)

// apiServerURL is in the errors of the API server's client; no body may
// repeat it to a caller.
const apiServerURL = "https://10.96.0.1:443/apis/authentication.k8s.io/v1/tokenreviews"

// answered is what a caller should get.
type answered struct {
	code       int
	retryAfter string // "" for no header
	body       string // a part of the body
}

var (
	// The API server did not answer: retry.
	retryIn = func(s, body string) answered { return answered{http.StatusTooManyRequests, s, body} }
	// It refused the controller's own review.
	refusedToken  = answered{http.StatusUnauthorized, "", "refused the controller's token review"}
	refusedAccess = answered{http.StatusForbidden, "", "refused the controller's access review"}
)

// reviewFailures are what creating a review can return instead of one, as
// client-go returns them: an API status, or the error of the request
// that got none. Each is tried on both reviews.
var reviewFailures = []struct {
	name          string
	err           error
	token, access answered
}{
	{"429 TooManyRequests with Retry-After", apierrors.NewTooManyRequests("too many requests", 7),
		retryIn("7", "too busy to answer (429 TooManyRequests)"), retryIn("7", "too busy to answer (429 TooManyRequests)")},
	{"429 TooManyRequests without Retry-After", apierrors.NewTooManyRequests("too many requests", 0),
		retryIn("1", "429 TooManyRequests"), retryIn("1", "429 TooManyRequests")},
	{"429 TooManyRequests asking for an hour", apierrors.NewTooManyRequests("too many requests", 3600),
		retryIn("60", "429 TooManyRequests"), retryIn("60", "429 TooManyRequests")},
	{"500 InternalError", apierrors.NewInternalError(errors.New("etcdserver: leader changed")),
		retryIn("1", "failed to answer (500 InternalError)"), retryIn("1", "failed to answer (500 InternalError)")},
	{"500 ServerTimeout", apierrors.NewServerTimeout(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "create", 2),
		retryIn("2", "(500 ServerTimeout)"), retryIn("2", "(500 ServerTimeout)")},
	{"503 ServiceUnavailable", apierrors.NewServiceUnavailable("shutting down"),
		retryIn("1", "(503 ServiceUnavailable)"), retryIn("1", "(503 ServiceUnavailable)")},
	{"504 Timeout", apierrors.NewTimeoutError("request did not complete within 60s", 0),
		retryIn("1", "(504 Timeout)"), retryIn("1", "(504 Timeout)")},
	// client-go retried a 429 until the review's context ended; it
	// returns the context's error, the 429 only in the message (rest's
	// wrapPreviousError). The flood's 500s, reproduced.
	{"context deadline exceeded after a 429", fmt.Errorf("%w - error from a previous attempt: %v",
		&url.Error{Op: "Post", URL: apiServerURL, Err: context.DeadlineExceeded}, apierrors.NewTooManyRequests("too many requests", 1)),
		retryIn("1", "did not answer within 5s"), retryIn("1", "did not answer within 5s")},
	{"context deadline exceeded", context.DeadlineExceeded,
		retryIn("1", "did not answer within 5s"), retryIn("1", "did not answer within 5s")},
	{"HTTP client timeout", &url.Error{Op: "Post", URL: apiServerURL, Err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}},
		retryIn("1", "did not answer within 5s"), retryIn("1", "did not answer within 5s")},
	{"client-go's rate limiter out of time", errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline"),
		retryIn("1", "could not get an answer from the API server"), retryIn("1", "could not get an answer from the API server")},
	{"connection refused", &url.Error{Op: "Post", URL: apiServerURL, Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}},
		retryIn("1", "could not get an answer from the API server"), retryIn("1", "could not get an answer from the API server")},
	{"connection reset", &url.Error{Op: "Post", URL: apiServerURL, Err: syscall.ECONNRESET},
		retryIn("1", "could not get an answer from the API server"), retryIn("1", "could not get an answer from the API server")},
	{"403 Forbidden: the controller may not create reviews", apierrors.NewForbidden(
		schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("RBAC: no rule")),
		refusedToken, refusedAccess},
	{"401 Unauthorized: the controller's own token", apierrors.NewUnauthorized("token expired"), refusedToken, refusedAccess},
	{"404 NotFound: the API is not served", apierrors.NewNotFound(schema.GroupResource{Resource: "tokenreviews"}, ""), refusedToken, refusedAccess},
}

// TestReviewFailures: a review the API server does not give, whichever
// way it fails, is answered 429 with Retry-After (it could not answer:
// retry) or 401/403 (it refused the controller), with the cause in the
// body and never an error of the controller's; and it is not remembered,
// so the next request asks again.
func TestReviewFailures(t *testing.T) {
	for _, tc := range reviewFailures {
		for _, resource := range []string{"tokenreviews", "subjectaccessreviews"} {
			t.Run(resource+"/"+tc.name, func(t *testing.T) {
				client, want := fakeAPIServer(), tc.token
				if resource == "subjectaccessreviews" {
					want = tc.access
				}
				client.PrependReactor("create", resource, func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.err
				})
				h := New(client, DefaultOptions()).Wrap(okHandler)
				for i := range 2 {
					rec := serve(h, "prometheus", "/metrics")
					checkAnswer(t, rec, want)
					if n := countActions(client.Actions(), resource); n != i+1 {
						t.Errorf("after %d requests %d %s, want %d: a failed review was remembered", i+1, n, resource, i+1)
					}
				}
			})
		}
	}
}

// TestReviewStatus: reviews the API server did answer, with an error or
// a reason in their status.
func TestReviewStatus(t *testing.T) {
	cases := []struct {
		name   string
		token  authenticationv1.TokenReviewStatus
		access authorizationv1.SubjectAccessReviewStatus
		want   answered
	}{
		{"token refused with an error", authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, square/go-jose: error in cryptographic primitive]"},
			authorizationv1.SubjectAccessReviewStatus{}, answered{http.StatusUnauthorized, "", "Unauthorized: the API server did not accept the token\n"}},
		{"token accepted with an error", authenticationv1.TokenReviewStatus{Authenticated: true, Error: "one authenticator failed"},
			authorizationv1.SubjectAccessReviewStatus{Allowed: true}, answered{http.StatusOK, "", "ok"}},
		{"access denied with an evaluation error", authenticationv1.TokenReviewStatus{Authenticated: true},
			authorizationv1.SubjectAccessReviewStatus{EvaluationError: "webhook authorizer unreachable"},
			answered{http.StatusForbidden, "", "Forbidden (user=system:serviceaccount:monitoring:prometheus, verb=get, path=/metrics)\n"}},
		{"access allowed with an evaluation error", authenticationv1.TokenReviewStatus{Authenticated: true},
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, EvaluationError: "webhook authorizer unreachable"}, answered{http.StatusOK, "", "ok"}},
		{"access denied with a reason", authenticationv1.TokenReviewStatus{Authenticated: true},
			authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "metrics are off limits"},
			answered{http.StatusForbidden, "", "path=/metrics): metrics are off limits\n"}},
		{"access both allowed and denied", authenticationv1.TokenReviewStatus{Authenticated: true},
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true}, answered{http.StatusForbidden, "", "Forbidden (user="}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeAPIServer()
			client.PrependReactor("create", "tokenreviews", func(a core.Action) (bool, runtime.Object, error) {
				review := a.(core.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
				review.Status = tc.token
				review.Status.User = authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}
				return true, review, nil
			})
			client.PrependReactor("create", "subjectaccessreviews", func(a core.Action) (bool, runtime.Object, error) {
				review := a.(core.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
				review.Status = tc.access
				return true, review, nil
			})
			h := New(client, DefaultOptions()).Wrap(okHandler)
			for range 2 {
				checkAnswer(t, serve(h, "prometheus", "/metrics"), tc.want)
			}
			// Answered reviews are remembered, refusals included.
			if n := len(client.Actions()); n > 2 {
				t.Errorf("%d reviews for two requests, want the first request's only", n)
			}
		})
	}
}

func serve(h http.Handler, token, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, want answered) {
	t.Helper()
	body := rec.Body.String()
	if rec.Code != want.code || !strings.Contains(body, want.body) {
		t.Errorf("answered %d %q, want %d with %q", rec.Code, body, want.code, want.body)
	}
	if got := rec.Header().Get("Retry-After"); got != want.retryAfter {
		t.Errorf("Retry-After %q, want %q", got, want.retryAfter)
	}
	if rec.Code != http.StatusOK && !strings.HasPrefix(body, http.StatusText(rec.Code)) {
		t.Errorf("body %q does not begin with %q", body, http.StatusText(rec.Code))
	}
	if strings.Contains(body, "10.96.0.1") {
		t.Errorf("body %q names the API server", body)
	}
}

func countActions(actions []core.Action, resource string) int {
	n := 0
	for _, a := range actions {
		if a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// TestReviewFailuresThroughClientGo: the same through client-go's REST
// client against an API server that answers every review one way, so
// that its retries and error wrapping are the real ones. A 429 with
// Retry-After is retried by client-go until the review's timeout: how the
// flood of issue 27 met an API server giving the controller one seat.
func TestReviewFailuresThroughClientGo(t *testing.T) {
	status := func(code int, reason string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d}`, reason, code)
		}
	}
	cases := []struct {
		name   string
		server http.HandlerFunc // nil: nothing listens
		want   answered
	}{
		{"429 with Retry-After, retried past the timeout", status(http.StatusTooManyRequests, "TooManyRequests"),
			retryIn("1", "did not answer within 300ms")},
		{"500 without Retry-After", status(http.StatusInternalServerError, "InternalError"),
			retryIn("1", "failed to answer (500 InternalError)")},
		{"403 to the controller", status(http.StatusForbidden, "Forbidden"), refusedToken},
		{"connection refused", nil, retryIn("1", "could not get an answer from the API server")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var served atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				tc.server(w, r)
			}))
			if tc.server == nil {
				srv.Close() // its address now refuses connections
			} else {
				defer srv.Close()
			}
			client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			o := DefaultOptions()
			o.Timeout = 300 * time.Millisecond
			checkAnswer(t, serve(New(client, o).Wrap(okHandler), "any", "/metrics"), tc.want)
			if tc.server != nil && served.Load() == 0 {
				t.Error("the review never reached the API server")
			}
		})
	}
}
