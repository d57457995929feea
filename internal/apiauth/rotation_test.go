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
	"testing"
	"time"
)

// floodNewcomers has five addresses send bogus tokens at their own
// bucket's rate for a second, which keeps the newcomers' lane full, and
// checks that it is.
func (f *flood) floodNewcomers(second int) {
	f.t.Helper()
	for i := range 5 {
		f.bogus(fmt.Sprintf("10.4.%d.%d:1", second%250, i+1), 10)
	}
	if codes := f.bogus("10.5.0.1:1", 1); codes[http.StatusTooManyRequests] != 1 {
		f.t.Fatalf("second %d: the flood did not fill the newcomers' lane: %v", second, codes)
	}
}

// TestRotatedTokenOutlivesFlood: a scraper whose projected token was
// renewed keeps scraping while five addresses keep the newcomers' lane
// full; an address that only presented a token the API server accepts
// (any Pod's) gets no such room.
func TestRotatedTokenOutlivesFlood(t *testing.T) {
	f := newFlood(t)
	const prom, pod = "10.9.9.9:5555", "10.8.8.8:1"
	if rec := f.get(prom, "prometheus", "/metrics"); rec.Code != http.StatusOK {
		t.Fatalf("first scrape: %d", rec.Code)
	}
	if rec := f.get(pod, "nobody", "/metrics"); rec.Code != http.StatusForbidden {
		t.Fatalf("a Pod's own token: %d, want 403", rec.Code)
	}
	f.clock.Step(time.Second)
	f.floodNewcomers(0)
	before := f.reviews("tokenreviews")
	if rec := f.get(prom, "prometheus-rotated", "/metrics"); rec.Code != http.StatusOK {
		t.Errorf("the scraper's renewed token during the flood: %d %q, want 200", rec.Code, rec.Body.String())
	}
	if got := f.reviews("tokenreviews"); got != before+1 {
		t.Errorf("%d TokenReviews for the renewed token, want 1", got-before)
	}
	// The Pod's address was accepted, never allowed: its new tokens wait
	// with the flood's.
	if codes := f.bogus(pod, 1); codes[http.StatusTooManyRequests] != 1 {
		t.Errorf("a new token from an address only ever accepted, during the flood: %v, want 429", codes)
	}
	// The lane is bounded like the others: a scraper's address that sends
	// bogus tokens spends its own bucket, then the lane's.
	f.clock.Step(time.Minute)
	f.floodNewcomers(1)
	before = f.reviews("tokenreviews")
	f.bogus(prom, 20)
	if got, max := f.reviews("tokenreviews")-before, DefaultOptions().RotatingBurst; got > max {
		t.Errorf("20 bogus tokens from the scraper's address: %d TokenReviews, want at most %d (the rotating lane's burst)", got, max)
	}
}

// TestRotatedTokenOnASharedSlash64: the rotating lane is kept for the
// scraper's whole address. A Pod in the same IPv6 /64 (often a whole
// node's) shares the newcomers' per-address bucket with it, but neither
// the scraper's place in the rotating lane nor its bucket there.
func TestRotatedTokenOnASharedSlash64(t *testing.T) {
	f := newFlood(t)
	const prom, neighbour = "[fd00:10:244:1::10]:5555", "[fd00:10:244:1::66]:1"
	if rec := f.get(prom, "prometheus", "/metrics"); rec.Code != http.StatusOK {
		t.Fatalf("first scrape: %d", rec.Code)
	}
	f.clock.Step(time.Second)
	f.floodNewcomers(0)
	// The neighbour's bogus tokens wait with the flood's, and take
	// nothing from the scraper's room.
	before := f.reviews("tokenreviews")
	if codes := f.bogus(neighbour, 20); codes[http.StatusTooManyRequests] != 20 {
		t.Errorf("bogus tokens from the scraper's /64 during the flood: %v, want every one 429", codes)
	}
	if got := f.reviews("tokenreviews"); got != before {
		t.Errorf("the neighbour's bogus tokens cost %d TokenReviews, want 0", got-before)
	}
	if rec := f.get(prom, "prometheus-rotated", "/metrics"); rec.Code != http.StatusOK {
		t.Errorf("the scraper's renewed token after its neighbour's flood: %d %q, want 200", rec.Code, rec.Body.String())
	}
}
