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
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

// fakeAPIServer answers reviews the way a real one would for three
// tokens: "prometheus" and its renewed "prometheus-rotated" may get
// /metrics, "nobody" may not; any other token is not accepted.
func fakeAPIServer() *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a core.Action) (bool, runtime.Object, error) {
		review := a.(core.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch review.Spec.Token {
		case "prometheus", "nobody", "prometheus-rotated":
			// prometheus-rotated: Prometheus's renewed token, the same
			// ServiceAccount.
			sa := strings.TrimSuffix(review.Spec.Token, "-rotated")
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: "system:serviceaccount:monitoring:" + sa, UID: "uid-" + sa,
				Groups: []string{"system:serviceaccounts"},
			}}
		case "broken":
			return true, nil, errors.New("connection refused")
		}
		return true, review, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a core.Action) (bool, runtime.Object, error) {
		review := a.(core.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		attrs := review.Spec.NonResourceAttributes
		review.Status.Allowed = review.Spec.User == "system:serviceaccount:monitoring:prometheus" &&
			attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get"
		return true, review, nil
	})
	return client
}

func TestFilter(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("bar_controller_syncs_total 1\n")) })
	cases := []struct {
		name, header, path string
		want               int
		reviews            []string // the API calls, in order
	}{
		{"no token", "", "/metrics", http.StatusUnauthorized, nil},
		{"not a bearer token", "Basic cHJvbWV0aGV1czp4", "/metrics", http.StatusUnauthorized, nil},
		{"token the API server refuses", "Bearer forged", "/metrics", http.StatusUnauthorized, []string{"tokenreviews"}},
		{"allowed user", "Bearer prometheus", "/metrics", http.StatusOK, []string{"tokenreviews", "subjectaccessreviews"}},
		{"user without the permission", "Bearer nobody", "/metrics", http.StatusForbidden, []string{"tokenreviews", "subjectaccessreviews"}},
		{"allowed user, other path", "Bearer prometheus", "/debug/pprof", http.StatusForbidden, []string{"tokenreviews", "subjectaccessreviews"}},
		{"API server unreachable", "Bearer broken", "/metrics", http.StatusTooManyRequests, []string{"tokenreviews"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeAPIServer()
			h := New(client, DefaultOptions()).Wrap(metrics)
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("status %d, want %d (%s)", rec.Code, tc.want, rec.Body.String())
			}
			var got []string
			for _, a := range client.Actions() {
				got = append(got, a.GetResource().Resource)
			}
			if len(got) != len(tc.reviews) {
				t.Fatalf("API calls %v, want %v", got, tc.reviews)
			}
			for i := range got {
				if got[i] != tc.reviews[i] {
					t.Errorf("API calls %v, want %v", got, tc.reviews)
				}
			}
			if tc.want == http.StatusOK && rec.Body.String() != "bar_controller_syncs_total 1\n" {
				t.Errorf("body %q: the wrapped handler did not answer", rec.Body.String())
			}
		})
	}
}

// TestFilterCaches checks that a scraper costs the API server two reviews,
// not two per scrape, and that the review carries the user's identity and
// the request's path and verb.
func TestFilterCaches(t *testing.T) {
	client := fakeAPIServer()
	h := New(client, DefaultOptions()).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 5 {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer prometheus")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
	}
	actions := client.Actions()
	if len(actions) != 2 {
		t.Fatalf("%d API calls for 5 scrapes, want 2", len(actions))
	}
	sar := actions[1].(core.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:monitoring:prometheus", UID: "uid-prometheus", Groups: []string{"system:serviceaccounts"},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}
	if sar.Spec.User != want.User || sar.Spec.UID != want.UID || len(sar.Spec.Groups) != 1 || sar.Spec.Groups[0] != want.Groups[0] ||
		sar.Spec.ResourceAttributes != nil || *sar.Spec.NonResourceAttributes != *want.NonResourceAttributes {
		t.Errorf("SubjectAccessReview spec %+v, want %+v", sar.Spec, want)
	}
}
