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
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// What a caller of the endpoint can make the API server do is bounded
// here, before any review is sent. A review that would go past a bound is
// not sent at all: the caller gets 429 and the API server nothing.
//
// Reviews go in one of two lanes, each with a token bucket (reviews per
// second) and a bound on reviews in flight:
//
//   - newcomers: TokenReviews of tokens this process has not seen accepted
//     recently. Every bogus token of a flood lands here, and so does a
//     scraper's first scrape. The lane's bucket bounds what a flood costs
//     the API server, however many addresses it comes from. In front of it,
//     each client address has a small bucket of its own, so that one prober
//     spends at most its own share of the lane and a scraper at another
//     address still finds room in it (a flood from many addresses can still
//     fill the lane; it cannot make the API server do more).
//   - returning: TokenReviews of tokens the API server accepted recently
//     (their cached answer expired, see allowTTL), and every
//     SubjectAccessReview, which only follows an accepted token. A flood of
//     bogus tokens never gets here, so a Prometheus that has scraped before
//     keeps scraping however busy the newcomers are.
//
// A caller with a token the API server accepts can still spend the
// returning lane, e.g. by asking for many paths (one access review each);
// it stays bounded, and such a caller could as well ask the API server
// itself.
//
// kube-rbac-proxy and controller-runtime's secure metrics send a review for
// every uncached token, unbounded, from the controller's own client.
//
// What was weighed and left out: cheap checks of a token's shape (a JWT's
// three segments, a length) before any review. A flood defeats them for
// free, by sending well-shaped garbage, and they could refuse valid tokens:
// the API server's static token file and webhook authenticators accept any
// string. The bounds are the defence; an empty token is the only one
// refused without asking (401).

// lane is one token bucket and a bound on reviews in flight.
type lane struct {
	name     string
	clock    clock.PassiveClock
	limiter  *rate.Limiter
	inFlight chan struct{}
}

func newLane(name string, c clock.PassiveClock, perSecond float64, burst, inFlight int) *lane {
	return &lane{name: name, clock: c, limiter: rate.NewLimiter(rate.Limit(perSecond), burst), inFlight: make(chan struct{}, inFlight)}
}

// admit takes a slot for one review, or says why there is none. It never
// waits: a caller that waited would hold a connection and a goroutine for
// each request of a flood.
func (l *lane) admit() (release func(), reason string) {
	select {
	case l.inFlight <- struct{}{}:
	default:
		return nil, metrics.AuthThrottledInFlight
	}
	if !l.limiter.AllowN(l.clock.Now(), 1) {
		<-l.inFlight
		return nil, metrics.AuthThrottledRate
	}
	return func() { <-l.inFlight }, ""
}

// clientLimiter keeps a token bucket per client address, for the
// newcomers' lane only. Addresses are the connection's, not a header's
// (X-Forwarded-For is whatever the caller writes). IPv6 clients are keyed
// by their /64, which one host usually owns whole, so that cycling through
// its addresses does not make a prober many clients.
type clientLimiter struct {
	clock     clock.PassiveClock
	perSecond rate.Limit
	burst     int

	mu sync.Mutex
	// An idle client's bucket is full again after burst/perSecond, so
	// forgetting it after idleTTL changes nothing; the size bounds the
	// memory a flood from many addresses can take. Evicting a bucket only
	// ever gives its client a full one: the lane behind still bounds the
	// total.
	buckets *cache.LRUExpireCache
}

const (
	clientBuckets = 4096
	idleTTL       = time.Minute
)

func newClientLimiter(c clock.PassiveClock, perSecond float64, burst int) *clientLimiter {
	return &clientLimiter{clock: c, perSecond: rate.Limit(perSecond), burst: burst,
		buckets: cache.NewLRUExpireCacheWithClock(clientBuckets, c)}
}

func (c *clientLimiter) allow(remoteAddr string) bool {
	key := clientKey(remoteAddr)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.buckets.Get(key)
	if !ok {
		l = rate.NewLimiter(c.perSecond, c.burst)
	}
	// Added again each time: the entry expires idleTTL after last use.
	c.buckets.Add(key, l, idleTTL)
	return l.(*rate.Limiter).AllowN(c.clock.Now(), 1)
}

// clientKey is the address's IP, or its /64 for IPv6; the whole string if
// it does not parse (then every such caller shares one bucket).
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return remoteAddr
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
