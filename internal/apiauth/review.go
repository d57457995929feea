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
	"crypto/sha256"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// Results, the "result" label of bar_controller_metrics_auth_reviews_total.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

// authenticate returns whose token it is, or nil if the API server does not
// accept it, or a *throttledError if it would have to ask and may not now.
func (f *Filter) authenticate(ctx context.Context, token, remoteAddr string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if user, ok := f.cachedUser(key); ok {
		metrics.RecordAuthReused(metrics.AuthTokenReview, "cache")
		return user, nil
	}
	l := f.newcomers
	identity, known := f.knownTokens.Get(key)
	switch {
	case known:
		l = f.returning
	case f.isScraper(remoteAddr):
		// A new token from where a scraper was allowed: its projected
		// token rotated (the kubelet renews it within the hour).
		l = f.rotating
	}
	// ran: this request sent the review (or found its answer); the
	// others waiting on it share that.
	ran := false
	v, err, _ := f.inFlight.Do("token\x00"+string(key[:]), func() (any, error) {
		ran = true
		// The review just before may have answered while this request
		// was on its way here.
		if user, ok := f.cachedUser(key); ok {
			metrics.RecordAuthReused(metrics.AuthTokenReview, "cache")
			return user, nil
		}
		// A newcomer is bounded by where it comes from; a returning
		// token by whose it is: an identity with many tokens of its own
		// spends its own share of the returning lane.
		var release func()
		var reason string
		if l == f.newcomers || l == f.rotating {
			clients, key := f.clients, clientKey(remoteAddr)
			if l == f.rotating {
				clients, key = f.scraperClients, scraperKey(remoteAddr)
			}
			if !clients.allowKey(key) {
				metrics.RecordAuthThrottled(metrics.AuthTokenReview, l.name, metrics.AuthThrottledClient)
				return nil, &throttledError{lane: l.name, reason: metrics.AuthThrottledClient}
			}
			release, reason = l.admit()
		} else {
			release, reason = throttle(f.returningIDs, identity.(string), l)
		}
		if release == nil {
			metrics.RecordAuthThrottled(metrics.AuthTokenReview, l.name, reason)
			return nil, &throttledError{lane: l.name, reason: reason}
		}
		defer release()
		rctx, cancel := f.reviewContext(ctx)
		defer cancel()
		review, err := f.client.AuthenticationV1().TokenReviews().Create(rctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			metrics.RecordAuthReview(metrics.AuthTokenReview, l.name, resultError)
			return nil, err
		}
		if !review.Status.Authenticated {
			// Status.Error is why, such as "invalid bearer token": a
			// refusal all the same, as the API server's webhook token
			// authenticator takes it, so it is remembered as one.
			klog.FromContext(ctx).V(4).Info("Token not accepted", "error", review.Status.Error)
			metrics.RecordAuthReview(metrics.AuthTokenReview, l.name, resultDenied)
			f.refusedTokens.Add(key, struct{}{}, denyTTL)
			// A revoked token leaves the returning lane.
			f.knownTokens.Remove(key)
			return (*authenticationv1.UserInfo)(nil), nil
		}
		metrics.RecordAuthReview(metrics.AuthTokenReview, l.name, resultAllowed)
		user := review.Status.User
		f.acceptedTokens.Add(key, &user, allowTTL)
		f.knownTokens.Add(key, user.Username, knownTTL)
		return &user, nil
	})
	if !ran {
		metrics.RecordAuthReused(metrics.AuthTokenReview, "shared")
	}
	if err != nil {
		return nil, err
	}
	return v.(*authenticationv1.UserInfo), nil
}

// isScraper says whether a request from remoteAddr was allowed within
// knownTTL.
func (f *Filter) isScraper(remoteAddr string) bool {
	_, ok := f.scrapers.Get(scraperKey(remoteAddr))
	return ok
}

// cachedUser is the remembered answer for a token's hash: the user, or nil
// for a refused token; ok is false if there is none.
func (f *Filter) cachedUser(key [sha256.Size]byte) (user *authenticationv1.UserInfo, ok bool) {
	if v, ok := f.acceptedTokens.Get(key); ok {
		return v.(*authenticationv1.UserInfo), true
	}
	if _, ok := f.refusedTokens.Get(key); ok {
		return nil, true
	}
	return nil, false
}

// authorize asks whether user may use verb on the non-resource URL path.
// Only users the API server accepted get here; their reviews go through
// the access lane, each identity within its own share of it.
func (f *Filter) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (decision, error) {
	// fmt prints maps sorted by key, so equal extras give equal keys.
	key := strings.Join([]string{user.UID, user.Username, strings.Join(user.Groups, ","), fmt.Sprint(user.Extra), verb, path}, "\x00")
	if d, ok := f.cachedDecision(key); ok {
		metrics.RecordAuthReused(metrics.AuthAccessReview, "cache")
		return d, nil
	}
	l := f.access
	// ran: this request sent the review (or found its answer); the
	// others waiting on it share that.
	ran := false
	v, err, _ := f.inFlight.Do("access\x00"+key, func() (any, error) {
		ran = true
		if d, ok := f.cachedDecision(key); ok {
			metrics.RecordAuthReused(metrics.AuthAccessReview, "cache")
			return d, nil
		}
		release, reason := throttle(f.accessIDs, user.Username, l)
		if release == nil {
			metrics.RecordAuthThrottled(metrics.AuthAccessReview, l.name, reason)
			return nil, &throttledError{lane: l.name, reason: reason}
		}
		defer release()
		extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		rctx, cancel := f.reviewContext(ctx)
		defer cancel()
		review, err := f.client.AuthorizationV1().SubjectAccessReviews().Create(rctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			metrics.RecordAuthReview(metrics.AuthAccessReview, l.name, resultError)
			return nil, err
		}
		// EvaluationError: some authorizer of the API server's chain
		// failed; the others' answer stands, as for the API server's own
		// requests.
		if review.Status.EvaluationError != "" {
			klog.FromContext(ctx).V(2).Info("Subject access review partly evaluated", "user", user.Username, "path", path, "error", review.Status.EvaluationError)
		}
		d := decision{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
		if d.allowed {
			metrics.RecordAuthReview(metrics.AuthAccessReview, l.name, resultAllowed)
			f.decisions.Add(key, d, allowTTL)
		} else {
			metrics.RecordAuthReview(metrics.AuthAccessReview, l.name, resultDenied)
			f.refusals.Add(key, d, denyTTL)
		}
		return d, nil
	})
	if !ran {
		metrics.RecordAuthReused(metrics.AuthAccessReview, "shared")
	}
	if err != nil {
		return decision{}, err
	}
	return v.(decision), nil
}

func (f *Filter) cachedDecision(key string) (decision, bool) {
	if v, ok := f.decisions.Get(key); ok {
		return v.(decision), true
	}
	if v, ok := f.refusals.Get(key); ok {
		return v.(decision), true
	}
	return decision{}, false
}
