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

// Package adaptive limits how much work is in flight against the API
// server by what the API server says, instead of by a fixed number.
//
// A fixed number of workers is wrong in one of two worlds (make bench and
// test/faults measured both): on a healthy API server 4 leave it idle part
// of the time, and where API Priority and Fairness rejects the controller,
// 16 collapse, each rejected write waiting out its Retry-After while it
// holds a worker. So the limit moves, as TCP's congestion window does
// (additive increase, multiplicative decrease):
//
//   - rejected (429, or any answer with Retry-After): halve, at once;
//   - slower: when most requests of a window took more than Tolerance
//     times the recent average of the same kind of request, the API
//     server has started queueing, and more in flight only adds to the
//     queue: shrink by a tenth. The average, not the fastest answer ever:
//     on a busy API server every answer is slower than on an idle one,
//     and more in flight may still get more done; what says "too many"
//     is latency that rises as the limit does;
//   - otherwise, if the window used the whole limit and nothing was
//     rejected for a while (ThrottleHold): one more (double, until the
//     first decrease: the slow start).
//
// A window is as many answers as the limit, from requests sent after the
// last change: answers to requests sent before it describe the old
// limit, and acting on them again would decrease twice for one cause.
//
// Maintained Go libraries for this exist only as parts of larger
// frameworks or without users; the rule is a few lines, and its table
// tests say exactly what it does.
package adaptive

import (
	"context"
	"math"
	"sync"
	"time"
)

// Reasons a limit changes, the "reason" of Change and of the metrics.
const (
	ReasonSlowStart = "slow_start" // doubled: nothing pushed back yet
	ReasonIncrease  = "increase"   // one more: a full window went well
	ReasonThrottled = "throttled"  // halved: the API server rejected a request
	ReasonLatency   = "latency"    // a tenth less: the API server is queueing
)

// Config says how a Limiter moves.
type Config struct {
	// Min and Max bound the limit; Initial is where it starts.
	Min, Max, Initial int
	// Tolerance is how many times the recent average of its kind a
	// request may take before it counts as slow. Default 2.
	Tolerance float64
	// ThrottleHold is how long after a rejection the limit does not grow.
	// Probing is what AIMD does, and each probe past the limit costs a
	// rejection; where a rejection is cheap (a dropped packet) that is
	// fine, but a 429 comes with a Retry-After that the request waits
	// out, a second or more, holding its slot. Growing again at once
	// kept a one-seat priority level rejecting ten times as often as 4
	// fixed workers, and converging nine times slower (make bench).
	// Default 10 s.
	ThrottleHold time.Duration
	// OnChange, if set, is called (without the Limiter's lock) after each
	// change of the whole-number limit.
	OnChange func(Change)
	// Resources, if set, are the only resources whose writes Transport
	// observes ("deployments", "bars", "events": the last path segment
	// before a name, without group or version). The limit bounds the
	// work in its slots; a write that holds none, such as a TokenReview
	// for the metrics endpoint or the webhook certificate keeper's
	// Secret update, sent by a client built from the same configuration,
	// says nothing about that work's cost, and a 429 on it must not halve
	// the limit.
	Resources []string
}

// Change is one change of the limit, and the window that caused it.
type Change struct {
	From, To int
	Reason   string
	// Samples is how many answers the window held, Slow how many of
	// them were slow, Throttled how many were rejections.
	Samples, Slow, Throttled int
}

// Limiter hands out slots, at most Limit() at a time, in the order they
// were asked for, and moves that limit by what Observe is told.
type Limiter struct {
	cfg Config
	now func() time.Time

	mu      sync.Mutex
	limit   float64
	inUse   int
	waiters []chan struct{}
	// slowStart lasts until the first decrease.
	slowStart bool
	// changed is when the limit last changed: answers to requests sent
	// before it belong to no window.
	changed time.Time
	// holdUntil: no increase before it (ThrottleHold).
	holdUntil time.Time
	win       window
	// avg is the recent average answer time of each kind of request.
	avg map[string]float64
}

type window struct {
	samples, slow, throttled int
	// full: the limit was reached during the window (in use, or a
	// waiter queued): only then does an increase make sense.
	full bool
}

// New returns a Limiter at cfg.Initial, with defaults filled in.
func New(cfg Config) *Limiter {
	if cfg.Min < 1 {
		cfg.Min = 1
	}
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	cfg.Initial = min(max(cfg.Initial, cfg.Min), cfg.Max)
	if cfg.Tolerance <= 1 {
		cfg.Tolerance = 2
	}
	if cfg.ThrottleHold <= 0 {
		cfg.ThrottleHold = 10 * time.Second
	}
	return &Limiter{cfg: cfg, now: time.Now, limit: float64(cfg.Initial), slowStart: true, avg: map[string]float64{}}
}

// Acquire waits for a slot, or for ctx to end. Every nil return must be
// followed by one Release.
func (l *Limiter) Acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if len(l.waiters) == 0 && l.inUse < l.whole() {
		l.inUse++
		if l.inUse == l.whole() {
			l.win.full = true
		}
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	l.win.full = true
	l.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, w := range l.waiters {
			if w == ch {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// Granted as ctx ended: give the slot to the next in line.
		l.inUse--
		l.grant()
		return ctx.Err()
	}
}

// Release gives a slot back.
func (l *Limiter) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inUse--
	l.grant()
}

// Limit returns the current limit; InUse the slots held; Waiting how many
// wait for one.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.whole()
}

// InUse returns how many slots are held.
func (l *Limiter) InUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inUse
}

// Waiting returns how many callers wait in Acquire.
func (l *Limiter) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters)
}

func (l *Limiter) whole() int { return int(math.Floor(l.limit)) }

// grant hands free slots to waiters, first come first served. Called with
// mu held.
func (l *Limiter) grant() {
	for len(l.waiters) > 0 && l.inUse < l.whole() {
		close(l.waiters[0])
		l.waiters = l.waiters[1:]
		l.inUse++
	}
}

// Observe is told of one answer of the API server: to a request of kind
// (say "PATCH deployments") sent at sent, which took took; throttled if
// the API server rejected it or asked to be retried later.
func (l *Limiter) Observe(kind string, sent time.Time, took time.Duration, throttled bool) {
	l.mu.Lock()
	now := l.now()
	// A rejection is answered at once, before any work: it would make a
	// baseline no real answer comes near.
	slow := !throttled && l.isSlow(kind, took)
	if sent.Before(l.changed) {
		// Sent under the previous limit.
		l.mu.Unlock()
		return
	}
	var change *Change
	switch {
	case throttled:
		l.win.samples++
		l.win.throttled++
		l.holdUntil = now.Add(l.cfg.ThrottleHold)
		change = l.set(now, l.limit/2, ReasonThrottled)
	default:
		l.win.samples++
		if slow {
			l.win.slow++
		}
		if l.win.samples >= l.whole() {
			change = l.closeWindow(now)
		}
	}
	l.mu.Unlock()
	if change != nil && l.cfg.OnChange != nil {
		l.cfg.OnChange(*change)
	}
}

// closeWindow decides on a full window. Called with mu held.
func (l *Limiter) closeWindow(now time.Time) *Change {
	switch {
	case 2*l.win.slow > l.win.samples:
		return l.set(now, l.limit*0.9, ReasonLatency)
	case !l.win.full:
		// The work did not need the limit: raising it would say nothing
		// about whether the API server could take more.
		l.win = window{}
		return nil
	case now.Before(l.holdUntil):
		// Rejected not long ago: see throttleHold.
		l.win = window{}
		return nil
	case l.slowStart:
		return l.set(now, l.limit*2, ReasonSlowStart)
	default:
		return l.set(now, l.limit+1, ReasonIncrease)
	}
}

// set moves the limit to v (bounded), starts a new window, and returns
// the change if the whole-number limit moved. Called with mu held.
func (l *Limiter) set(now time.Time, v float64, reason string) *Change {
	from := l.whole()
	w := l.win
	l.limit = min(max(v, float64(l.cfg.Min)), float64(l.cfg.Max))
	if reason == ReasonThrottled || reason == ReasonLatency {
		l.slowStart = false
	}
	l.changed = now
	l.win = window{full: len(l.waiters) > 0 || l.inUse >= l.whole()}
	l.grant()
	if l.whole() == from {
		return nil
	}
	return &Change{From: from, To: l.whole(), Reason: reason, Samples: w.samples, Slow: w.slow, Throttled: w.throttled}
}

// isSlow records took as an answer of kind and reports whether it took
// more than Tolerance times the recent average of its kind. Called with
// mu held.
func (l *Limiter) isSlow(kind string, took time.Duration) bool {
	avg, ok := l.avg[kind]
	if !ok {
		l.avg[kind] = float64(took)
		return false
	}
	// The average moves by a hundredth of each answer's difference: a rise
	// that lasts a few hundred answers (a busier API server the limit
	// cannot help, a larger etcd) becomes the new normal; a rise within a
	// window does not.
	l.avg[kind] = avg + (float64(took)-avg)/averageOver
	return float64(took) > l.cfg.Tolerance*avg
}

// averageOver is how many answers the average of a kind spans, roughly.
const averageOver = 100
