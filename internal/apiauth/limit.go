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
// Reviews go in one of four lanes, each with a token bucket (reviews per
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
//   - rotating: TokenReviews of tokens not accepted recently that come
//     from an address a request was allowed from (not merely accepted:
//     every Pod's token is) within knownTTL. A scraper's projected token
//     is renewed within the hour; its new token would otherwise queue
//     with the flood, which five addresses at their own bucket's rate
//     keep full, and the scrapes would fail until the flood stopped.
//     The address is the connection's (TCP), whole (scraperKey), which a
//     Pod elsewhere cannot take; Pods behind one node address (host
//     network, SNAT) share it.
//   - returning: TokenReviews of tokens the API server accepted recently
//     (their cached answer expired, see allowTTL). A flood of bogus tokens
//     never gets here, so a Prometheus that has scraped before keeps
//     scraping however busy the newcomers are.
//   - access: SubjectAccessReviews, which only follow an accepted token.
//
// Any Pod's token is accepted, so the returning and access lanes are open
// to every identity in the cluster, and one identity could drain them: by
// asking for many paths or methods (one access review each, a refusal
// remembered per path), or with many tokens of its own. So in front of
// both, each identity (the user the API server named) has a bucket and a
// bound on reviews in flight of its own, as each address has for the
// newcomers: a caller that the API server accepts but does not authorize
// spends its own share, and a Prometheus that needs a review, the first
// for a new path or again after its answer expired, finds the lane open.
// Token re-reviews and access reviews have lanes of their own, so a flood
// of one kind cannot take the other's. Paths nothing serves are answered
// 404 and methods other than GET 405, before any review
// (apiauth.go): a loop over /x1, /x2, ... costs nothing.
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

// keyedLimiter keeps a token bucket and a count of reviews in flight per
// key: a client address (in front of the newcomers' and rotating lanes)
// or an identity (in front of the returning and access lanes). Addresses are the
// connection's, not a header's (X-Forwarded-For is whatever the caller
// writes). IPv6 clients are keyed by their /64, which one host usually
// owns whole, so that cycling through its addresses does not make a prober
// many clients (clientKey).
type keyedLimiter struct {
	clock     clock.PassiveClock
	perSecond rate.Limit
	burst     int
	// inFlight bounds one key's reviews waiting for the API server, so
	// that, with the API server slow, one key cannot hold all of a lane's.
	inFlight int

	mu sync.Mutex
	// An idle key's bucket is full again after burst/perSecond, so
	// forgetting it after idleTTL changes nothing; the size bounds the
	// memory a flood from many keys can take. Evicting a bucket only ever
	// gives its key a full one: the lane behind still bounds the total.
	buckets *cache.LRUExpireCache
	waiting map[string]int // only keys with reviews in flight
}

const (
	clientBuckets = 4096
	idleTTL       = time.Minute
)

func newKeyedLimiter(c clock.PassiveClock, perSecond float64, burst, inFlight int) *keyedLimiter {
	return &keyedLimiter{clock: c, perSecond: rate.Limit(perSecond), burst: burst, inFlight: inFlight,
		buckets: cache.NewLRUExpireCacheWithClock(clientBuckets, c), waiting: map[string]int{}}
}

// admit takes one review for key, or says which bound refused it. It
// never waits, for the same reason as lane.admit.
func (c *keyedLimiter) admit(key string) (release func(), reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight > 0 && c.waiting[key] >= c.inFlight {
		return nil, metrics.AuthThrottledInFlight
	}
	l, ok := c.buckets.Get(key)
	if !ok {
		l = rate.NewLimiter(c.perSecond, c.burst)
	}
	// Added again each time: the entry expires idleTTL after last use.
	c.buckets.Add(key, l, idleTTL)
	if !l.(*rate.Limiter).AllowN(c.clock.Now(), 1) {
		return nil, metrics.AuthThrottledRate
	}
	c.waiting[key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.waiting[key]--; c.waiting[key] <= 0 {
			delete(c.waiting, key)
		}
	}, ""
}

// allow is admit for a bucket alone: the per-address buckets bound how
// often an address may ask, while the lane behind bounds reviews in
// flight.
func (c *keyedLimiter) allow(remoteAddr string) bool {
	return c.allowKey(clientKey(remoteAddr))
}

// allowKey is allow for a key already made.
func (c *keyedLimiter) allowKey(key string) bool {
	release, _ := c.admit(key)
	if release == nil {
		return false
	}
	release()
	return true
}

// throttle takes a slot for one review of identity in l, the identity's
// own bound first; release is nil if either refused, and reason says why.
func throttle(id *keyedLimiter, identity string, l *lane) (release func(), reason string) {
	releaseID, _ := id.admit(identity)
	if releaseID == nil {
		return nil, metrics.AuthThrottledIdentity
	}
	releaseLane, reason := l.admit()
	if releaseLane == nil {
		releaseID()
		return nil, reason
	}
	return func() { releaseLane(); releaseID() }, ""
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

// scraperKey is the whole address, IPv6 too: the rotating lane is kept
// for the address a scraper was allowed from, and a /64 is often a whole
// node's (kind gives each node one), which a Pod beside Prometheus shares.
func scraperKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return remoteAddr
	}
	return ip.Unmap().String()
}
