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

package adaptive

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// answer is n Observe calls: answers of one kind, each taking took, to
// requests sent after the last change unless early.
type answer struct {
	n         int
	took      time.Duration
	throttled bool
	early     bool // sent before the last change
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestLimiterMoves(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		// full: hold every slot while answering, so windows count as full.
		full    bool
		answers []answer
		want    []int // the limit after each answer group
		reasons []string
	}{{
		name:    "slow start doubles while full windows go well",
		cfg:     Config{Min: 1, Max: 32, Initial: 4},
		full:    true,
		answers: []answer{{n: 4, took: ms(10)}, {n: 8, took: ms(10)}, {n: 16, took: ms(10)}, {n: 32, took: ms(10)}},
		want:    []int{8, 16, 32, 32},
		reasons: []string{ReasonSlowStart, ReasonSlowStart, ReasonSlowStart},
	}, {
		name:    "a window that did not fill the limit changes nothing",
		cfg:     Config{Min: 1, Max: 32, Initial: 4},
		answers: []answer{{n: 4, took: ms(10)}, {n: 40, took: ms(10)}},
		want:    []int{4, 4},
	}, {
		name:    "one rejection halves at once",
		cfg:     Config{Min: 1, Max: 32, Initial: 16},
		full:    true,
		answers: []answer{{n: 1, took: ms(1), throttled: true}},
		want:    []int{8},
		reasons: []string{ReasonThrottled},
	}, {
		name: "rejections to requests sent before the decrease do not decrease again",
		cfg:  Config{Min: 1, Max: 32, Initial: 16},
		full: true,
		answers: []answer{{n: 1, took: ms(1), throttled: true}, {n: 15, took: ms(1), throttled: true, early: true},
			{n: 1, took: ms(1), throttled: true}},
		want:    []int{8, 8, 4},
		reasons: []string{ReasonThrottled, ReasonThrottled},
	}, {
		name:    "never below Min",
		cfg:     Config{Min: 2, Max: 32, Initial: 4},
		full:    true,
		answers: []answer{{n: 1, took: ms(1), throttled: true}, {n: 1, took: ms(1), throttled: true}},
		want:    []int{2, 2},
		reasons: []string{ReasonThrottled},
	}, {
		name: "no growth for a while after a rejection",
		cfg:  Config{Min: 1, Max: 32, Initial: 16, ThrottleHold: time.Second},
		full: true,
		// Each answer is a millisecond apart: 8+9 answers are well
		// within the hold, and change nothing.
		answers: []answer{{n: 1, took: ms(1), throttled: true}, {n: 8, took: ms(10)}, {n: 9, took: ms(10)}},
		want:    []int{8, 8, 8},
		reasons: []string{ReasonThrottled},
	}, {
		name: "after a decrease, growth is one per full window",
		cfg:  Config{Min: 1, Max: 32, Initial: 16, ThrottleHold: time.Nanosecond},
		full: true,
		answers: []answer{{n: 1, took: ms(1), throttled: true},
			{n: 8, took: ms(10)}, {n: 9, took: ms(10)}, {n: 10, took: ms(10)}},
		want:    []int{8, 9, 10, 11},
		reasons: []string{ReasonThrottled, ReasonIncrease, ReasonIncrease, ReasonIncrease},
	}, {
		name: "most answers slower than twice the average: a tenth less, and no more slow start",
		cfg:  Config{Min: 1, Max: 64, Initial: 20},
		full: true,
		// 1 fast answer sets the baseline; 19 slow ones close the window.
		answers: []answer{{n: 1, took: ms(5)}, {n: 19, took: ms(15)}, {n: 18, took: ms(5)}},
		want:    []int{20, 18, 19},
		reasons: []string{ReasonLatency, ReasonIncrease},
	}, {
		name:    "slow answers up to the tolerance are fine",
		cfg:     Config{Min: 1, Max: 64, Initial: 20},
		full:    true,
		answers: []answer{{n: 1, took: ms(5)}, {n: 19, took: ms(10)}},
		want:    []int{20, 40},
		reasons: []string{ReasonSlowStart},
	}, {
		name:    "no more than Max",
		cfg:     Config{Min: 1, Max: 6, Initial: 4},
		full:    true,
		answers: []answer{{n: 4, took: ms(10)}, {n: 6, took: ms(10)}},
		want:    []int{6, 6},
		reasons: []string{ReasonSlowStart},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var reasons []string
			tc.cfg.OnChange = func(c Change) { reasons = append(reasons, c.Reason) }
			l := New(tc.cfg)
			clock := time.Unix(1000, 0)
			l.now = func() time.Time { return clock }
			for i, a := range tc.answers {
				if tc.full {
					l.mu.Lock()
					l.win.full = true
					l.mu.Unlock()
				}
				for range a.n {
					clock = clock.Add(time.Millisecond)
					// Sent now and answered after took: the clock only
					// orders the sends against the changes.
					sent := clock
					if a.early {
						sent = l.changed.Add(-time.Millisecond)
					}
					l.Observe("PATCH deployments", sent, a.took, a.throttled)
					if tc.full {
						l.mu.Lock()
						l.win.full = true
						l.mu.Unlock()
					}
				}
				if got := l.Limit(); got != tc.want[i] {
					t.Fatalf("after answers %d (%+v): limit %d, want %d", i, a, got, tc.want[i])
				}
			}
			if !slices.Equal(reasons, tc.reasons) {
				t.Errorf("changes %v, want %v", reasons, tc.reasons)
			}
		})
	}
}

// Averages are kept per kind: a kind that is slower by nature (a status
// apply of a custom resource against a Deployment create) is not slow.
func TestLimiterBaselinePerKind(t *testing.T) {
	l := New(Config{Min: 1, Max: 64, Initial: 10})
	clock := time.Unix(1000, 0)
	l.now = func() time.Time { return clock }
	l.Observe("POST events", clock, ms(2), false)
	for range 9 {
		clock = clock.Add(time.Millisecond)
		l.Observe("PATCH bars/status", clock, ms(20), false)
	}
	if l.win.slow != 0 {
		t.Errorf("%d answers counted slow; the first of a kind sets its baseline", l.win.slow)
	}
}

// A rise that lasts becomes the new normal: the API server got busier,
// or etcd larger, and that alone is no reason to keep shrinking.
func TestLimiterAverageFollowsALastingRise(t *testing.T) {
	l := New(Config{Min: 1, Max: 64, Initial: 64})
	for range 50 {
		l.isSlow("PATCH deployments", ms(5))
	}
	if !l.isSlow("PATCH deployments", ms(11)) {
		t.Fatal("11 ms after answers of 5 ms: want slow")
	}
	slow := 0
	for range 500 {
		if l.isSlow("PATCH deployments", ms(11)) {
			slow++
		}
	}
	if slow > 100 {
		t.Errorf("%d of 500 answers of 11 ms counted slow; the average should have followed them", slow)
	}
	if l.isSlow("PATCH deployments", ms(11)) {
		t.Error("after 500 answers of 11 ms, 11 ms is still slow")
	}
}

func TestAcquireWaitsInOrder(t *testing.T) {
	l := New(Config{Min: 1, Max: 4, Initial: 1})
	ctx := context.Background()
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if err := l.Acquire(ctx); err != nil {
				t.Error(err)
				return
			}
			order <- i
			l.Release()
		}()
		// Each waits before the next asks.
		for l.Waiting() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	l.Release()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("slot went to waiter %d, want %d", got, want)
		}
	}
}

func TestAcquireGivesUpWithItsContext(t *testing.T) {
	l := New(Config{Min: 1, Max: 1, Initial: 1})
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Acquire(ctx) }()
	for l.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Acquire returned nil after its context ended")
	}
	l.Release()
	if l.InUse() != 0 || l.Waiting() != 0 {
		t.Fatalf("in use %d, waiting %d after the only holder released", l.InUse(), l.Waiting())
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A rise of the limit lets waiters in at once.
func TestIncreaseGrantsWaiters(t *testing.T) {
	l := New(Config{Min: 1, Max: 8, Initial: 1})
	clock := time.Unix(1000, 0)
	l.now = func() time.Time { return clock }
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		if err := l.Acquire(context.Background()); err == nil {
			close(got)
		}
	}()
	for l.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	clock = clock.Add(time.Millisecond)
	l.Observe("PATCH deployments", clock, ms(1), false) // a full window of 1: double
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiter did not get the new slot (limit %d)", l.Limit())
	}
}

func TestTransportObservesWrites(t *testing.T) {
	var status int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		method string
		status int
		want   int // the limit after one answer, from 8
	}{
		{http.MethodGet, http.StatusTooManyRequests, 8},   // reads are not observed
		{http.MethodPatch, http.StatusTooManyRequests, 4}, // halved
		{http.MethodPost, http.StatusCreated, 8},          // a window of 8 needs 8 answers
	} {
		l := New(Config{Min: 1, Max: 16, Initial: 8})
		status = tc.status
		client := &http.Client{Transport: l.Transport(http.DefaultTransport)}
		req, _ := http.NewRequest(tc.method, srv.URL+"/apis/apps/v1/namespaces/ns/deployments/d", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := l.Limit(); got != tc.want {
			t.Errorf("%s answered %d: limit %d, want %d", tc.method, tc.status, got, tc.want)
		}
	}
}

func TestKind(t *testing.T) {
	for path, want := range map[string]string{
		"/apis/apps/v1/namespaces/ns/deployments/d":                         "PATCH deployments",
		"/apis/apps/v1/namespaces/ns/deployments":                           "PATCH deployments",
		"/apis/barcontroller.dev/v1/namespaces/ns/bars/b/status":            "PATCH bars/status",
		"/apis/events.k8s.io/v1/namespaces/ns/events":                       "PATCH events",
		"/api/v1/namespaces/ns/secrets/s":                                   "PATCH secrets",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/bar-controller":  "PATCH leases",
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/bars.x/st": "PATCH customresourcedefinitions/st",
		"/healthz": "PATCH /healthz",
	} {
		if got := Kind(http.MethodPatch, path); got != want {
			t.Errorf("Kind(PATCH, %s) = %q, want %q", path, got, want)
		}
	}
}
