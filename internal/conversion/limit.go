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

package conversion

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// What one caller of the webhook can make a replica hold is bounded here,
// before a byte of the body is read. The webhook's Service is reachable
// from every Pod unless a NetworkPolicy says otherwise
// (artifacts/install/networkpolicy.yaml), it has no client authentication,
// and every replica that serves it is a leader candidate: a replica killed
// for its memory takes conversion, and perhaps the Lease, with it.
//
// A review's memory is a few times its body (the body, the objects' raw
// copies in the decoded review, the converted objects, the encoded answer),
// so the bound is on bodies: every request reserves its Content-Length
// (at least minReservation, so small requests are bounded in number too)
// from a budget of the process, and the share one client address may hold
// is a part of it. A request that does not fit is answered 429 with
// Retry-After, unread: waiting would hold a goroutine and a connection per
// request of a flood. The per-address share is what keeps the API server
// converting while one Pod floods: the API server calls from its own
// addresses, and a flood of slow bodies from elsewhere holds at most that
// Pod's share until the server's read timeout ends each of its requests.
// Many Pods flooding at once can still take the whole budget (and get
// 429s, not the replica's memory); the NetworkPolicy is the defence
// against them.
const (
	// maxRequestBytes bounds one review. The API server sends one object
	// for a read or a write (at most its request limit, 3 MiB, and etcd
	// keeps at most 1.5 MiB) and a list's objects in one review when a
	// list is not served from its watch cache: pages of kubectl's and
	// client-go's 500 Bars are about 1-3 MB. A larger review is refused
	// (413), and the list that caused it must be paged smaller.
	maxRequestBytes = 4 << 20
	// budgetBytes is the Content-Length all requests in flight may
	// reserve together. A review's peak memory is about 5.5 times its
	// body (TestWebhookFlood in test/e2e: with a budget of 12 MiB full of
	// reviews converted at once, a replica's peak resident memory went
	// from 34 MiB to 92 and 106 MiB in two runs; with this one, to 66 and
	// 79 MiB), so 8 MiB is about 45 MiB at worst: well within
	// the conversion-only Pod's GOMEMLIMIT (115 MiB) over its 34 MiB at
	// rest, and a fraction of the controller's headroom.
	budgetBytes = 8 << 20
	// addressShare: the most of the budget one client address may hold:
	// one review of the largest size and more, and a quarter of the
	// budget (128 small reviews) always left to the other addresses.
	addressShare = budgetBytes * 3 / 4
	// minReservation makes small requests count: at most budgetBytes /
	// minReservation (512) requests in flight, 384 of them from one
	// address.
	minReservation = 16 << 10
	// busyRetryAfter is what a refused caller is told to wait: requests
	// in flight end within the server's read and write timeouts, most of
	// them in milliseconds.
	busyRetryAfter = time.Second
)

// budget is the bytes reserved by the requests in flight, in all and per
// client address.
type budget struct {
	total, perAddress int64

	mu        sync.Mutex
	reserved  int64
	byAddress map[string]int64
}

func newBudget(total, perAddress int64) *budget {
	return &budget{total: total, perAddress: perAddress, byAddress: map[string]int64{}}
}

// reserve takes n bytes for a request from addr, or returns false.
func (b *budget) reserve(addr string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reserved+n > b.total || b.byAddress[addr]+n > b.perAddress {
		return false
	}
	b.reserved += n
	b.byAddress[addr] += n
	metrics.SetConversionReserved(b.reserved)
	return true
}

func (b *budget) release(addr string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved -= n
	if b.byAddress[addr] -= n; b.byAddress[addr] <= 0 {
		delete(b.byAddress, addr) // a map of only the addresses in flight
	}
	metrics.SetConversionReserved(b.reserved)
}

// limited serves h only to requests that fit the budget and declare a
// body the webhook would read.
func limited(b *budget, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		refuse := func(result string, code int, msg string) {
			metrics.RecordConversion(result, 0, time.Since(start))
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", strconv.Itoa(int(busyRetryAfter/time.Second)))
			}
			// The body is left unread: the server closes the connection
			// rather than read on for the next request.
			w.Header().Set("Connection", "close")
			http.Error(w, msg, code)
		}
		switch {
		case r.Method != http.MethodPost:
			refuse(metrics.ConversionInvalid, http.StatusMethodNotAllowed, "only POST")
			return
		case r.ContentLength < 0:
			// The API server always sends a length; without one the
			// budget could not be reserved before reading.
			refuse(metrics.ConversionInvalid, http.StatusLengthRequired, "a ConversionReview needs a Content-Length")
			return
		case r.ContentLength > maxRequestBytes:
			refuse(metrics.ConversionTooLarge, http.StatusRequestEntityTooLarge, tooLarge(r.ContentLength))
			return
		}
		n := max(r.ContentLength, minReservation)
		addr := clientAddress(r.RemoteAddr)
		if !b.reserve(addr, n) {
			refuse(metrics.ConversionBusy, http.StatusTooManyRequests,
				"the webhook has as many reviews in flight as it may hold; retry")
			return
		}
		defer b.release(addr, n)
		h.ServeHTTP(w, r)
	})
}

func tooLarge(n int64) string {
	return fmt.Sprintf("request body of %d bytes is over the webhook's limit of %d bytes: a review that large is a list of Bars "+
		"not served from the API server's watch cache; page it (limit/continue)", n, maxRequestBytes)
}

// clientAddress is the connection's IP: one Pod, one share, however many
// connections it opens.
func clientAddress(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}
