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
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAcceptedIdentityFloodLeavesReturningScraper: a caller whose token
// the API server accepts ("nobody", any Pod's ServiceAccount) asks for a
// new path each time, each an access review. It spends its own identity's
// share and no more; a Prometheus whose cached answers expired needs a
// token review again and an access review, and gets both, every minute.
// The clock stands still within a minute, so nothing refills behind the
// test's back: the counts are exact.
func TestAcceptedIdentityFloodLeavesReturningScraper(t *testing.T) {
	f := newFlood(t)
	o := DefaultOptions()
	const prom, pod = "10.9.9.9:5555", "10.4.0.1:1"
	if rec := f.get(prom, "prometheus", "/metrics"); rec.Code != http.StatusOK {
		t.Fatalf("first scrape: %d", rec.Code)
	}
	for minute := range 3 {
		f.clock.Step(allowTTL + time.Second)
		codes := map[int]int{}
		before := f.reviews("subjectaccessreviews")
		for i := range 200 {
			codes[f.get(pod, "nobody", fmt.Sprintf("/p%d-%d", minute, i)).Code]++
		}
		// The flooder's token expired too: its re-review is one of its
		// share of the returning lane, its access reviews its share of
		// the access lane.
		if got := f.reviews("subjectaccessreviews") - before; got != o.IdentityBurst {
			t.Errorf("minute %d: the flood sent %d access reviews, want %d (its identity's burst); answers %v", minute, got, o.IdentityBurst, codes)
		}
		tokens := f.reviews("tokenreviews")
		if rec := f.get(prom, "prometheus", "/metrics"); rec.Code != http.StatusOK {
			t.Errorf("minute %d: the returning scraper got %d (%s) after the flood, want 200", minute, rec.Code, rec.Body)
		}
		if f.reviews("tokenreviews") != tokens+1 {
			t.Errorf("minute %d: the scraper's expired token was not reviewed again", minute)
		}
	}
}

// Paths a ServeMux does not serve are 404 and methods other than GET 405,
// with no review sent: a loop over them costs the API server
// nothing.
func TestUnservedRequestsCostNoReview(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", okHandler)
	client := fakeAPIServer()
	h := New(client, DefaultOptions()).Wrap(mux)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/x1", http.StatusNotFound},
		{http.MethodGet, "/metrics/x", http.StatusNotFound},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodHead, "/metrics", http.StatusMethodNotAllowed},
		{"PROPFIND", "/metrics", http.StatusMethodNotAllowed},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		req.Header.Set("Authorization", "Bearer prometheus")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d reviews sent for requests nothing serves", n)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer prometheus")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("GET /metrics: %d, want 200", rec.Code)
	}
}
