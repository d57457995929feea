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
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// What a flood costs the API server, counted as the fake clientset's
// actions. The clock stands still unless a test steps it, so no bucket
// refills behind a test's back.

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

type flood struct {
	t      *testing.T
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	h      http.Handler
}

func newFlood(t *testing.T) *flood {
	client := fakeAPIServer()
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &flood{t: t, client: client, clock: clock, h: newWithClock(client, DefaultOptions(), clock).Wrap(okHandler)}
}

// get sends GET path with token from remote and returns the response.
func (f *flood) get(remote, token, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remote
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// reviews counts the API calls on resource so far.
func (f *flood) reviews(resource string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// bogus sends n requests with distinct tokens the API server refuses and
// counts the answers by status code.
func (f *flood) bogus(remote string, n int) map[int]int {
	codes := map[int]int{}
	for i := range n {
		rec := f.get(remote, fmt.Sprintf("bogus-%s-%d-%d", remote, f.clock.Now().UnixNano(), i), "/metrics")
		codes[rec.Code]++
		if rec.Code == http.StatusTooManyRequests && (rec.Header().Get("Retry-After") != "1" ||
			!strings.HasPrefix(rec.Body.String(), "Too Many Requests: could not review the token: the controller sends no more reviews now (bound: ")) {
			f.t.Errorf("429 with Retry-After %q and body %q, want 1 and the bound named", rec.Header().Get("Retry-After"), rec.Body.String())
		}
	}
	return codes
}

func TestFloodFromOneAddress(t *testing.T) {
	f := newFlood(t)
	o := DefaultOptions()
	codes := f.bogus("10.0.0.1:40000", 1000)
	if got := f.reviews("tokenreviews"); got != o.ClientBurst {
		t.Errorf("1,000 bogus tokens from one address: %d TokenReviews, want %d (the address's burst)", got, o.ClientBurst)
	}
	if codes[http.StatusUnauthorized] != o.ClientBurst || codes[http.StatusTooManyRequests] != 1000-o.ClientBurst {
		t.Errorf("answers %v, want %d × 401 and the rest 429", codes, o.ClientBurst)
	}
	// Another port of the same host is the same client.
	f.bogus("10.0.0.1:40001", 10)
	if got := f.reviews("tokenreviews"); got != o.ClientBurst {
		t.Errorf("another port: %d TokenReviews in all, want still %d", got, o.ClientBurst)
	}
	// The address's bucket refills at ClientRate.
	f.clock.Step(2 * time.Second)
	f.bogus("10.0.0.1:40000", 100)
	if got, want := f.reviews("tokenreviews"), o.ClientBurst+2*int(o.ClientRate); got != want {
		t.Errorf("after 2 s: %d TokenReviews, want %d", got, want)
	}
}

// TestClientKey: what counts as one client for the per-address buckets.
func TestClientKey(t *testing.T) {
	same := [][2]string{
		{"10.0.0.1:40000", "10.0.0.1:40001"},
		{"[::ffff:10.0.0.1]:1", "10.0.0.1:2"},
		{"[2001:db8::1]:1", "[2001:db8::2]:1"}, // one /64
		{"[2001:db8::1]:1", "[2001:db8::ffff:ffff:ffff:ffff]:9"},
	}
	for _, p := range same {
		if clientKey(p[0]) != clientKey(p[1]) {
			t.Errorf("%s and %s: keys %q and %q, want one client", p[0], p[1], clientKey(p[0]), clientKey(p[1]))
		}
	}
	different := [][2]string{
		{"10.0.0.1:1", "10.0.0.2:1"},
		{"[2001:db8::1]:1", "[2001:db8:0:1::1]:1"},
	}
	for _, p := range different {
		if clientKey(p[0]) == clientKey(p[1]) {
			t.Errorf("%s and %s: both %q, want two clients", p[0], p[1], clientKey(p[0]))
		}
	}
}

func TestFloodFromManyAddresses(t *testing.T) {
	f := newFlood(t)
	o := DefaultOptions()
	for i := range 200 {
		f.bogus(fmt.Sprintf("10.0.%d.%d:1234", i/250, i%250+1), 5)
	}
	if got := f.reviews("tokenreviews"); got != o.NewcomerBurst {
		t.Errorf("1,000 bogus tokens from 200 addresses: %d TokenReviews, want %d (the newcomers' burst)", got, o.NewcomerBurst)
	}
	// Over 10 s the newcomers' bucket lets NewcomerRate a second through.
	for range 10 {
		f.clock.Step(time.Second)
		for i := range 200 {
			f.bogus(fmt.Sprintf("10.1.%d.%d:1234", i/250, i%250+1), 1)
		}
	}
	if got, want := f.reviews("tokenreviews"), o.NewcomerBurst+10*int(o.NewcomerRate); got != want {
		t.Errorf("after 10 s more: %d TokenReviews, want %d", got, want)
	}
}

// TestReturningScraperOutlivesFlood: a scraper the API server accepted
// before keeps scraping while a flood from many addresses empties the
// newcomers' lane, also once its cached answer expired.
func TestReturningScraperOutlivesFlood(t *testing.T) {
	f := newFlood(t)
	const prom = "10.9.9.9:5555"
	if rec := f.get(prom, "prometheus", "/metrics"); rec.Code != http.StatusOK {
		t.Fatalf("first scrape: %d", rec.Code)
	}
	for minute := range 3 {
		// The answers expire, and the flood has the newcomers' lane.
		f.clock.Step(allowTTL + time.Second)
		for i := range 100 {
			f.bogus(fmt.Sprintf("10.2.%d.%d:1", minute, i+1), 2)
		}
		if codes := f.bogus("10.3.0.1:1", 1); codes[http.StatusTooManyRequests] != 1 {
			t.Fatalf("minute %d: the flood did not fill the newcomers' lane: %v", minute, codes)
		}
		before := f.reviews("tokenreviews")
		if rec := f.get(prom, "prometheus", "/metrics"); rec.Code != http.StatusOK {
			t.Errorf("minute %d: the returning scraper got %d during the flood, want 200", minute, rec.Code)
		}
		if f.reviews("tokenreviews") != before+1 {
			t.Errorf("minute %d: the expired token was not reviewed again", minute)
		}
	}
	// Its access reviews, 1 a minute, were never throttled either.
	if got := f.reviews("subjectaccessreviews"); got != 4 {
		t.Errorf("%d SubjectAccessReviews over 4 expired minutes, want 4", got)
	}
}

// TestCacheLifetimes: an accepted token is reviewed again after allowTTL
// (a revoked token keeps access no longer), a refused one after denyTTL,
// and neither before.
func TestCacheLifetimes(t *testing.T) {
	f := newFlood(t)
	scrape := func(token string) int { return f.get("10.0.0.1:1", token, "/metrics").Code }
	scrape("prometheus")
	scrape("refused")
	f.clock.Step(denyTTL - time.Second)
	scrape("prometheus")
	scrape("refused")
	if got := f.reviews("tokenreviews"); got != 2 {
		t.Errorf("%d TokenReviews within denyTTL, want 2", got)
	}
	f.clock.Step(2 * time.Second)
	scrape("refused")
	if got := f.reviews("tokenreviews"); got != 3 {
		t.Errorf("%d TokenReviews just after denyTTL, want 3 (the refused token again)", got)
	}
	f.clock.Step(allowTTL - denyTTL - 2*time.Second)
	scrape("prometheus")
	if got := f.reviews("tokenreviews"); got != 3 {
		t.Errorf("%d TokenReviews just before allowTTL, want 3", got)
	}
	f.clock.Step(2 * time.Second)
	scrape("prometheus")
	if got := f.reviews("tokenreviews"); got != 4 {
		t.Errorf("%d TokenReviews just after allowTTL, want 4 (the accepted token again)", got)
	}
	if allowTTL > time.Minute || denyTTL >= allowTTL {
		t.Errorf("allowTTL %v, denyTTL %v: want at most a minute, refusals shorter", allowTTL, denyTTL)
	}
}

// TestConcurrentIdenticalTokens: requests with the same token while its
// review is in flight wait for that review instead of sending their own,
// and do not count against the in-flight bound.
func TestConcurrentIdenticalTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fakeAPIServer()
		release := make(chan struct{})
		client.PrependReactor("create", "tokenreviews", func(core.Action) (bool, runtime.Object, error) {
			<-release // the API server is slow
			return false, nil, nil
		})
		h := New(client, DefaultOptions()).Wrap(okHandler)
		codes := make([]int, 20)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				req.RemoteAddr = fmt.Sprintf("10.0.0.%d:1", i+1)
				req.Header.Set("Authorization", "Bearer prometheus")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				codes[i] = rec.Code
			})
		}
		synctest.Wait() // all 20 are waiting: one on the API server, 19 on it
		close(release)
		wg.Wait()
		for i, c := range codes {
			if c != http.StatusOK {
				t.Errorf("request %d: %d, want 200", i, c)
			}
		}
		var reviews []string
		for _, a := range client.Actions() {
			reviews = append(reviews, a.GetResource().Resource)
		}
		if len(reviews) != 2 {
			t.Errorf("20 concurrent requests with one token: API calls %v, want one TokenReview and one SubjectAccessReview", reviews)
		}
	})
}

// TestInFlightBound: with the API server slow, reviews pile up to the
// lane's bound; beyond it callers get 429 at once. (An API server over
// HTTP: the fake clientset runs one reactor at a time.)
func TestInFlightBound(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":false}}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	h := New(client, o).Wrap(okHandler)
	get := func(i int) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = fmt.Sprintf("10.0.0.%d:1", i+1)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer token-%d", i))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	codes := make([]int, o.NewcomerInFlight)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i] = get(i) })
		<-arrived // in flight
	}
	for i := range 3 {
		if code := get(o.NewcomerInFlight + i); code != http.StatusTooManyRequests {
			t.Errorf("a review beyond %d in flight: %d, want 429", o.NewcomerInFlight, code)
		}
	}
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusUnauthorized {
			t.Errorf("reviewed request %d: %d, want 401", i, c)
		}
	}
	if served != o.NewcomerInFlight {
		t.Errorf("%d reviews reached the API server, want %d", served, o.NewcomerInFlight)
	}
	// The slots are free again.
	go func() { <-arrived }()
	if code := get(99); code != http.StatusUnauthorized {
		t.Errorf("after the slow reviews: %d, want 401", code)
	}
}

// TestReviewTimeout: a review the API server never answers fails after
// Options.Timeout, even if the scraper would wait longer, and frees its
// slot; the caller may retry (429).
func TestReviewTimeout(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer srv.Close()
	defer close(hang)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Timeout = 200 * time.Millisecond
	h := New(client, o).Wrap(okHandler)
	for i := range o.NewcomerInFlight + 1 {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = fmt.Sprintf("10.0.0.%d:1", i+1)
		req.Header.Set("Authorization", "Bearer any")
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		took := time.Since(start)
		if rec.Code != http.StatusTooManyRequests || took < o.Timeout || took > 10*o.Timeout {
			t.Errorf("request %d: %d after %v, want 429 after the %v timeout (and the slot freed for the next)", i, rec.Code, took, o.Timeout)
		}
		if !strings.Contains(rec.Body.String(), "did not answer within 200ms") || rec.Header().Get("Retry-After") != "1" {
			t.Errorf("request %d: body %q, Retry-After %q: want the timeout named, and 1", i, rec.Body.String(), rec.Header().Get("Retry-After"))
		}
	}
}
