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

// Package apiauth lets the API server decide who may call one of the
// controller's HTTP endpoints, the contract of kube-rbac-proxy and of
// kubebuilder's secure metrics: the caller sends a bearer token, the API
// server says whose it is (a TokenReview), and whether that user may "get"
// the request's path as a non-resource URL (a SubjectAccessReview). A
// Prometheus whose ServiceAccount is bound to a ClusterRole with
//
//	nonResourceURLs: ["/metrics"], verbs: ["get"]
//
// may scrape; anyone else gets 401 or 403, or 429 (limit.go, answer.go),
// never 500. The controller's own ServiceAccount needs "create" on
// tokenreviews and subjectaccessreviews.
//
// k8s.io/apiserver's delegating authenticator and authorizer implement the
// same two calls, but importing them adds gRPC, OpenTelemetry and CEL and
// more than doubles the binary (44 to 99 MB, measured); the two reviews are
// typed client-go calls.
//
// Every review is work the API server does in the controller's name, in
// its priority level and, by identity, in the same flow as its syncs and
// Lease renewals. So answers are remembered (allowTTL, denyTTL), identical
// reviews in flight are sent once, and what callers can make the filter
// send is bounded (limit.go): past the bounds the caller gets 429 and the
// API server nothing. Give the filter a client of its own (main.go does),
// so its requests never queue behind the controller's in client-go either.
package apiauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// How long answers are remembered. A revoked token or binding keeps
// working for at most allowTTL (controller-runtime's choice; the API
// server's delegating authenticator keeps 5 minutes), a new binding works
// within denyTTL. Refusals are kept apart from acceptances, so a flood of
// bogus tokens can never push a scraper's accepted token out of the cache.
const (
	allowTTL  = time.Minute
	denyTTL   = 10 * time.Second
	cacheSize = 1024
	// knownTTL: how long a token the API server accepted keeps its place in
	// the returning lane (limit.go) after its answer expired. Only the
	// token's hash is kept, and it grants nothing: the token is reviewed
	// again all the same.
	knownTTL = 10 * time.Minute
)

// Options bound the reviews a Filter sends.
type Options struct {
	// Timeout bounds one review; a scraper waits no longer for an answer.
	Timeout time.Duration
	// NewcomerRate and NewcomerBurst are the token bucket of reviews of
	// tokens not accepted recently (every bogus token), NewcomerInFlight
	// the most of them waiting for the API server at once.
	NewcomerRate     float64
	NewcomerBurst    int
	NewcomerInFlight int
	// ClientRate and ClientBurst are each client address's own bucket
	// in front of the newcomers' lane.
	ClientRate  float64
	ClientBurst int
	// ReturningRate, ReturningBurst and ReturningInFlight bound the
	// reviews of tokens accepted recently.
	ReturningRate     float64
	ReturningBurst    int
	ReturningInFlight int
	// RotatingRate, RotatingBurst and RotatingInFlight bound the reviews
	// of new tokens from addresses a scraper was allowed from recently
	// (limit.go, the rotating lane).
	RotatingRate     float64
	RotatingBurst    int
	RotatingInFlight int
	// AccessRate, AccessBurst and AccessInFlight bound the access
	// reviews.
	AccessRate     float64
	AccessBurst    int
	AccessInFlight int
	// IdentityRate, IdentityBurst and IdentityInFlight are each
	// identity's own bound in front of the returning and the access
	// lanes (one for each lane).
	IdentityRate     float64
	IdentityBurst    int
	IdentityInFlight int
}

// Rate and Burst are what all the lanes together may send: a client's own
// rate limiter set to them never delays a review the lanes admitted.
func (o Options) Rate() float64 {
	return o.NewcomerRate + o.RotatingRate + o.ReturningRate + o.AccessRate
}

// Burst: see Rate.
func (o Options) Burst() int {
	return o.NewcomerBurst + o.RotatingBurst + o.ReturningBurst + o.AccessBurst
}

// DefaultOptions suit Prometheus scraping every few seconds: a scraper
// costs one token review (the returning lane) and one access review per
// path (the access lane) a minute, and its first scrape one newcomer
// review. A flood of bogus tokens costs the API server at most 5 reviews a
// second (plus a burst of 10) whatever its rate, and one address at most 1
// a second; a flood from one accepted identity at most 1 review a second
// in each of the returning and access lanes (plus a burst of 5), leaving
// the rest of them to the others. A scraper whose token rotated has a
// lane of its own, 1 a second (plus a burst of 2), that no flood reaches.
// The lanes together send at most 11 a second, plus a burst of 32.
func DefaultOptions() Options {
	return Options{
		Timeout:      5 * time.Second,
		NewcomerRate: 5, NewcomerBurst: 10, NewcomerInFlight: 2,
		RotatingRate: 1, RotatingBurst: 2, RotatingInFlight: 1,
		ClientRate: 1, ClientBurst: 5,
		ReturningRate: 2, ReturningBurst: 8, ReturningInFlight: 2,
		AccessRate: 3, AccessBurst: 12, AccessInFlight: 2,
		IdentityRate: 1, IdentityBurst: 5, IdentityInFlight: 1,
	}
}

// Filter wraps handlers so that only callers the API server authorizes
// reach them.
type Filter struct {
	client  kubernetes.Interface
	timeout time.Duration

	// Keys are sha256 hashes: a token is never kept as it is.
	acceptedTokens *cache.LRUExpireCache // tokenKey -> *authenticationv1.UserInfo
	refusedTokens  *cache.LRUExpireCache // tokenKey -> struct{}
	knownTokens    *cache.LRUExpireCache // tokenKey -> the username it was accepted for, see knownTTL
	// scrapers: addresses (scraperKey) a request was allowed from within
	// knownTTL, the only ones whose new tokens go to the rotating lane.
	scrapers  *cache.LRUExpireCache // scraperKey -> struct{}
	decisions *cache.LRUExpireCache // decisionKey -> decision, allowed ones
	refusals  *cache.LRUExpireCache // decisionKey -> decision, denied ones
	inFlight  singleflight.Group

	clients                                *keyedLimiter // per address (clientKey), for the newcomers
	scraperClients                         *keyedLimiter // per whole address (scraperKey), for the rotating lane
	returningIDs, accessIDs                *keyedLimiter // per identity
	newcomers, rotating, returning, access *lane
}

type decision struct {
	allowed bool
	reason  string
}

// New returns a Filter that asks the API server behind client, within opts.
func New(client kubernetes.Interface, opts Options) *Filter {
	return newWithClock(client, opts, clock.RealClock{})
}

func newWithClock(client kubernetes.Interface, opts Options, c clock.PassiveClock) *Filter {
	return &Filter{
		client: client, timeout: opts.Timeout,
		acceptedTokens: cache.NewLRUExpireCacheWithClock(cacheSize, c),
		refusedTokens:  cache.NewLRUExpireCacheWithClock(cacheSize, c),
		knownTokens:    cache.NewLRUExpireCacheWithClock(cacheSize, c),
		scrapers:       cache.NewLRUExpireCacheWithClock(cacheSize, c),
		decisions:      cache.NewLRUExpireCacheWithClock(cacheSize, c),
		refusals:       cache.NewLRUExpireCacheWithClock(cacheSize, c),
		// The lane behind bounds the addresses' reviews in flight.
		clients:        newKeyedLimiter(c, opts.ClientRate, opts.ClientBurst, 0),
		scraperClients: newKeyedLimiter(c, opts.ClientRate, opts.ClientBurst, 0),
		returningIDs:   newKeyedLimiter(c, opts.IdentityRate, opts.IdentityBurst, opts.IdentityInFlight),
		accessIDs:      newKeyedLimiter(c, opts.IdentityRate, opts.IdentityBurst, opts.IdentityInFlight),
		newcomers:      newLane("newcomers", c, opts.NewcomerRate, opts.NewcomerBurst, opts.NewcomerInFlight),
		rotating:       newLane("rotating", c, opts.RotatingRate, opts.RotatingBurst, opts.RotatingInFlight),
		returning:      newLane("returning", c, opts.ReturningRate, opts.ReturningBurst, opts.ReturningInFlight),
		access:         newLane("access", c, opts.AccessRate, opts.AccessBurst, opts.AccessInFlight),
	}
}

// Wrap returns h behind the filter. Every answer it gives itself is 401,
// 403 or 429 with the reason in the body (answer.go), or 404 and 405 for
// what it does not serve.
//
// If h is a *http.ServeMux (metrics.Handler is), a path it has no handler
// for is answered 404 before any review: the caller learns only what a
// scan of the port tells, the paths served, and a loop over made-up paths
// costs the API server nothing. Only GET is served (Prometheus and the Go
// profiles need nothing else), so "get" is the one verb a caller can make
// the filter ask about: a loop over methods costs nothing either.
func (f *Filter) Wrap(h http.Handler) http.Handler {
	mux, _ := h.(*http.ServeMux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		logger := klog.FromContext(ctx)
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed: only GET", http.StatusMethodNotAllowed)
			return
		}
		if mux != nil {
			if _, pattern := mux.Handler(r); pattern == "" {
				http.NotFound(w, r)
				return
			}
		}
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized: no bearer token", http.StatusUnauthorized)
			return
		}
		user, err := f.authenticate(ctx, token, r.RemoteAddr)
		if err != nil {
			f.failed(w, r, tokenReview, err, "Token review failed")
			return
		}
		if user == nil {
			// The API server's reason stays in our log (review.go): a
			// caller probing tokens learns nothing from it.
			logger.V(4).Info("Unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "Unauthorized: the API server did not accept the token", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(r.Method)
		d, err := f.authorize(ctx, user, verb, r.URL.Path)
		if err != nil {
			f.failed(w, r, accessReview, err, "Subject access review failed", "user", user.Username)
			return
		}
		if !d.allowed {
			logger.V(4).Info("Forbidden request", "user", user.Username, "path", r.URL.Path, "reason", d.reason)
			msg := fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s)", user.Username, verb, r.URL.Path)
			if d.reason != "" {
				// As the API server's own 403 does: the caller is known, and
				// the authorizer's reason is meant for it.
				msg += ": " + d.reason
			}
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		// Allowed, not merely accepted: any Pod's token is accepted, and
		// the rotating lane must stay out of a flooder's reach.
		f.scrapers.Add(scraperKey(r.RemoteAddr), struct{}{}, knownTTL)
		h.ServeHTTP(w, r)
	})
}

// failed answers a request whose review of the given kind gave no
// decision, and logs why unless a bound of ours refused it.
func (f *Filter) failed(w http.ResponseWriter, r *http.Request, review string, err error, msg string, kv ...any) {
	fail := classify(review, err, f.timeout)
	var throttled *throttledError
	if !errors.As(err, &throttled) {
		kv = append(kv, "path", r.URL.Path, "status", fail.code, "cause", fail.why)
		klog.FromContext(r.Context()).Error(err, msg, kv...)
	}
	fail.answer(w, review)
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// reviewContext is the context of one review: not the request's, since
// other requests may be waiting on the same review (singleflight) and one
// caller hanging up must not fail them all; bounded by the timeout.
func (f *Filter) reviewContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
}
