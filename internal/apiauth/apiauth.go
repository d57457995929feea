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
// may scrape; anyone else gets 401 or 403. The controller's own
// ServiceAccount needs "create" on tokenreviews and subjectaccessreviews.
//
// k8s.io/apiserver's delegating authenticator and authorizer implement the
// same two calls, but importing them adds gRPC, OpenTelemetry and CEL and
// more than doubles the binary (44 to 99 MB, measured); the two reviews are
// typed client-go calls, and apimachinery's expiring LRU cache keeps a
// scrape every few seconds from costing the API server anything after the
// first.
package apiauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// How long answers are remembered, as the API server's own delegating
// authorizer does: a revoked binding stops working within allowTTL, a new
// one starts working within denyTTL.
const (
	allowTTL  = 5 * time.Minute
	denyTTL   = 30 * time.Second
	cacheSize = 1024
)

// Filter wraps handlers so that only callers the API server authorizes
// reach them.
type Filter struct {
	client    kubernetes.Interface
	tokens    *cache.LRUExpireCache // sha256(token) -> *authenticationv1.UserInfo, nil if refused
	decisions *cache.LRUExpireCache // decisionKey -> decision
}

type decision struct {
	allowed bool
	reason  string
}

// New returns a Filter that asks the API server behind client.
func New(client kubernetes.Interface) *Filter {
	return &Filter{client: client, tokens: cache.NewLRUExpireCache(cacheSize), decisions: cache.NewLRUExpireCache(cacheSize)}
}

// Wrap returns h behind the filter.
func (f *Filter) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		logger := klog.FromContext(ctx)
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, err := f.authenticate(ctx, token)
		if err != nil {
			logger.Error(err, "Token review failed", "path", r.URL.Path)
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			// Why stays in our log: a caller probing tokens learns nothing.
			logger.V(4).Info("Unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(r.Method)
		d, err := f.authorize(ctx, user, verb, r.URL.Path)
		if err != nil {
			logger.Error(err, "Subject access review failed", "user", user.Username, "path", r.URL.Path)
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		if !d.allowed {
			logger.V(4).Info("Forbidden request", "user", user.Username, "path", r.URL.Path, "reason", d.reason)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s)", user.Username, verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate returns whose token it is, or nil if the API server does not
// accept it. Tokens are cached by hash, never kept in memory as they are.
func (f *Filter) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := f.tokens.Get(key); ok {
		return v.(*authenticationv1.UserInfo), nil
	}
	review, err := f.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if !review.Status.Authenticated {
		f.tokens.Add(key, (*authenticationv1.UserInfo)(nil), denyTTL)
		return nil, nil
	}
	user := review.Status.User
	f.tokens.Add(key, &user, allowTTL)
	return &user, nil
}

// authorize asks whether user may use verb on the non-resource URL path.
func (f *Filter) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (decision, error) {
	// fmt prints maps sorted by key, so equal extras give equal keys.
	key := strings.Join([]string{user.UID, user.Username, strings.Join(user.Groups, ","), fmt.Sprint(user.Extra), verb, path}, "\x00")
	if v, ok := f.decisions.Get(key); ok {
		return v.(decision), nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	review, err := f.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, err
	}
	d := decision{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
	ttl := denyTTL
	if d.allowed {
		ttl = allowTTL
	}
	f.decisions.Add(key, d, ttl)
	return d, nil
}
