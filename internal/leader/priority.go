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

package leader

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// Lease requests go first when API Priority and Fairness rejects them.
//
// The Lease client is a client of its own (main.go), but APF does not see
// clients: it classifies by identity, so the renewals share the
// controller's priority level, and its flow, with every sync. Where that
// level is small, the workers and Event writers keep its seats busy
// between them (a one-seat level measured busy 60-75% of each second by
// the writes alone during a cold start of 300 Bars, test/faults), and a
// renewal that finds the seat taken is rejected at once. client-go then
// waits out the Retry-After the API server sends, which APF raises with
// the rejections of the whole level (2 s, 4 s, up to 32 s), so three
// unlucky renewals use up the 10 s renew deadline: the leader gave up
// its Lease 10 s into a cold start and exited, under its own load
// (TestMetricsAuthFloodStarved).
//
// So a Lease request that is rejected with 429 is sent again after
// leaseRetryDelay, not after the Retry-After, and until it is answered
// otherwise, no other request of this process starts: the request that
// holds the seat ends within milliseconds, and the renewal gets it. The
// syncs pause only while a renewal is being rejected, a fraction of a
// second, and never longer than leaseRetryFor at a time; a Lease request
// that is merely slow (a slow webhook, an API server far away) holds
// nothing up, and neither does one that fails otherwise.

// leaseRetryDelay is how long a rejected Lease request waits before it is
// sent again: long enough for the requests under way to end (a write
// holds a seat for about 5-10 ms, test/faults), short enough to leave
// most of the retry period to spare. One Lease request is retried so at
// most 10 times (leaseRetryFor), each rejection costing the API server
// next to nothing.
const leaseRetryDelay = 100 * time.Millisecond

// leaseRetryFor bounds how long one Lease request is retried so, and so
// holds the other requests. Rejections that outlast it do not come from
// this process's own requests, which are all held: the seat is taken by
// someone else, and holding the syncs gains nothing. The 429 then goes
// to client-go, which waits out its Retry-After with nothing held, and
// sends the request again (through First again).
const leaseRetryFor = time.Second

// Priority lets the Lease requests of this process go before its other
// requests while API Priority and Fairness rejects them. Wrap the Lease
// client's transport with First and every other client's with Yield.
type Priority struct {
	mu sync.Mutex
	// rejected counts the Lease requests being retried after a 429; open
	// is closed while it is zero. Yield waits on open.
	rejected int
	open     chan struct{}
	delay    time.Duration
	retryFor time.Duration
}

// NewPriority returns a Priority with nothing waiting.
func NewPriority() *Priority {
	open := make(chan struct{})
	close(open)
	return &Priority{open: open, delay: leaseRetryDelay, retryFor: leaseRetryFor}
}

// First wraps the Lease client's transport: a request that gets 429 is
// sent again after leaseRetryDelay until it gets another answer, its
// context ends or leaseRetryFor has passed, and holds Yield's requests
// until then.
func (p *Priority) First(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || !resendable(req) {
			return resp, err
		}
		p.hold()
		defer p.release()
		giveUp := time.Now().Add(p.retryFor)
		for resp.StatusCode == http.StatusTooManyRequests {
			if time.Now().Add(p.delay).After(giveUp) {
				// The 429 is the answer: client-go knows what to do
				// with it.
				return resp, nil
			}
			timer := time.NewTimer(p.delay)
			select {
			case <-req.Context().Done():
				// client-go sees the context ended too.
				timer.Stop()
				return resp, nil
			case <-timer.C:
			}
			again, err := resend(req)
			if err != nil {
				return resp, nil
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp, err = rt.RoundTrip(again); err != nil {
				return nil, err
			}
		}
		return resp, nil
	})
}

// Yield wraps the transport of every other client: a request waits to
// start while a Lease request is being rejected, or until its context
// ends.
func (p *Priority) Yield(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		p.mu.Lock()
		open := p.open
		p.mu.Unlock()
		select {
		case <-open:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		return rt.RoundTrip(req)
	})
}

func (p *Priority) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rejected == 0 {
		p.open = make(chan struct{})
	}
	p.rejected++
}

func (p *Priority) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rejected--
	if p.rejected == 0 {
		close(p.open)
	}
}

// resendable: a request without a body, or one whose body can be had
// again (client-go's are: it sends bytes).
func resendable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

func resend(req *http.Request) (*http.Request, error) {
	again := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return again, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	again.Body = body
	return again, nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
