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

package guide

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The elector's timing, as kube-controller-manager's defaults (15 s,
// 10 s, 2 s) but with a renew deadline that is not a multiple of the
// retry period, so that no retry falls on the very instant the deadline
// ends and the count of attempts is exact.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 9 * time.Second
	retryPeriod   = 2 * time.Second
)

// leaseServer is a fake clientset whose Lease updates fail while fail
// says so (given the bubble's clock: the time since the test began),
// and which writes down, as offsets from the start, when each update
// was attempted and whether it failed.
type leaseServer struct {
	client *fake.Clientset
	start  time.Time
	fail   func(since time.Duration) bool

	mu      sync.Mutex
	updates []attempt
}

type attempt struct {
	At     time.Duration
	Failed bool
}

func newLeaseServer(fail func(time.Duration) bool) *leaseServer {
	s := &leaseServer{client: fake.NewClientset(), start: time.Now(), fail: fail}
	s.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		since := time.Since(s.start)
		failed := s.fail(since)
		s.mu.Lock()
		s.updates = append(s.updates, attempt{At: since, Failed: failed})
		s.mu.Unlock()
		if failed {
			return true, nil, apierrors.NewInternalError(context.DeadlineExceeded)
		}
		return false, nil, nil // the tracker stores it
	})
	return s
}

// failedAt returns the distinct instants at which updates failed: one
// per renewal attempt (an attempt may send more than one update: the
// optimistic one, then one after reading the Lease).
func (s *leaseServer) failedAt() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at []time.Duration
	for _, a := range s.updates {
		if a.Failed && !slices.Contains(at, a.At) {
			at = append(at, a.At)
		}
	}
	return at
}

func (s *leaseServer) updateCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

func (s *leaseServer) lock(identity string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "guide"},
		Client:     s.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
}

// election is one elector's life as its callbacks saw it, in offsets
// from the start of the test.
type election struct {
	started, stopped       time.Duration
	everStarted, leadEnded bool
	// updatesAtLeadEnd is how many Lease updates had been tried when
	// OnStartedLeading saw its context end.
	updatesAtLeadEnd int
}

// runElector runs an elector for identity until ctx ends or it stops
// leading, and returns what its callbacks saw once OnStartedLeading (if
// it was called) has returned too.
func runElector(ctx context.Context, s *leaseServer, identity string, releaseOnCancel bool) (election, error) {
	var (
		mu      sync.Mutex
		e       election
		leading context.Context
		done    = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            s.lock(identity),
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: releaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				defer close(done)
				mu.Lock()
				e.started, e.everStarted, leading = time.Since(s.start), true, ctx
				mu.Unlock()
				<-ctx.Done()
				n := s.updateCount()
				mu.Lock()
				e.updatesAtLeadEnd = n
				mu.Unlock()
			},
			OnStoppedLeading: func() {
				mu.Lock()
				defer mu.Unlock()
				e.stopped = time.Since(s.start)
				// Run cancels the leading context before it calls this.
				e.leadEnded = leading != nil && leading.Err() != nil
			},
		},
	})
	if err != nil {
		return election{}, err
	}
	le.Run(ctx)
	mu.Lock()
	started := e.everStarted
	mu.Unlock()
	if started {
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	return e, nil
}

// TestLeaderGivesUpWhenNoRenewalSucceedsWithinRenewDeadline proves: the
// leader renews every RetryPeriod; once a renewal fails it retries every
// RetryPeriod, and when none has succeeded within RenewDeadline it
// stops leading: OnStoppedLeading is called and Run returns, though
// nobody cancelled Run's own context. Without ReleaseOnCancel nothing
// more is written; with it the elector tries to release the Lease
// first, and only then ends the context OnStartedLeading was given.
//
// In a synctest bubble, so the times are exact. Updates fail from 5 s
// on: the renewal at 6 s is the first to fail, then the retries at 8,
// 10, 12 and 14 s (four retry periods) fail too, and the leader gives up
// at 6 s + RenewDeadline = 15 s, not a moment before.
func TestLeaderGivesUpWhenNoRenewalSucceedsWithinRenewDeadline(t *testing.T) {
	for _, release := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := newLeaseServer(func(since time.Duration) bool { return since >= 5*time.Second })
			e, err := runElector(context.Background(), s, "one", release)
			if err != nil {
				t.Fatal(err)
			}
			if !e.everStarted || e.started != 0 {
				t.Fatalf("started leading: %v at %v, want at 0s", e.everStarted, e.started)
			}
			want := []time.Duration{6 * time.Second, 8 * time.Second, 10 * time.Second, 12 * time.Second, 14 * time.Second}
			if release {
				want = append(want, 15*time.Second) // the release, which fails too
			}
			if got := s.failedAt(); !slices.Equal(got, want) {
				t.Errorf("ReleaseOnCancel=%v: failed Lease updates at %v, want %v", release, got, want)
			}
			if e.stopped != 15*time.Second || !e.leadEnded {
				t.Errorf("ReleaseOnCancel=%v: stopped leading at %v (leading context ended: %v), want at 15s with the context ended", release, e.stopped, e.leadEnded)
			}
			if n := s.updateCount(); e.updatesAtLeadEnd != n {
				t.Errorf("ReleaseOnCancel=%v: the leading context ended after %d of the %d updates, want after all of them", release, e.updatesAtLeadEnd, n)
			}
		})
	}
}

// TestLeaderKeepsLeadingThroughFailuresShorterThanRenewDeadline proves:
// failed renewals alone do not end leadership; only RenewDeadline
// without a success does. Updates fail from 5 s to 11 s: the attempts
// at 6, 8 and 10 s fail, the one at 12 s succeeds, and the elector leads
// on until its context is cancelled at 30 s.
func TestLeaderKeepsLeadingThroughFailuresShorterThanRenewDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLeaseServer(func(since time.Duration) bool { return since >= 5*time.Second && since < 11*time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e, err := runElector(ctx, s, "one", false)
		if err != nil {
			t.Fatal(err)
		}

		want := []time.Duration{6 * time.Second, 8 * time.Second, 10 * time.Second}
		if got := s.failedAt(); !slices.Equal(got, want) {
			t.Errorf("failed renewal attempts at %v, want %v", got, want)
		}
		if e.stopped != 30*time.Second {
			t.Errorf("stopped leading at %v, want 30s, when its context ended", e.stopped)
		}
	})
}

// TestReleaseOnCancelEmptiesTheLease proves: with ReleaseOnCancel, a
// leader whose context is cancelled writes the Lease once more, with no
// holder and a duration of one second, so that a standby need not wait
// out the lease; without it the Lease still names the old leader. And
// OnStoppedLeading is called by an elector that never led.
func TestReleaseOnCancelEmptiesTheLease(t *testing.T) {
	for _, release := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			s := newLeaseServer(func(time.Duration) bool { return false })
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var leader, standby election
			var leaderErr, standbyErr error
			wg.Go(func() { leader, leaderErr = runElector(ctx, s, "one", release) })
			synctest.Wait() // "one" holds the Lease (created at 0s) and waits to renew
			wg.Go(func() { standby, standbyErr = runElector(ctx, s, "two", release) })
			time.Sleep(5 * time.Second) // fake time: the bubble's clock
			cancel()
			wg.Wait()
			if leaderErr != nil || standbyErr != nil {
				t.Fatal(leaderErr, standbyErr)
			}

			l, err := s.client.CoordinationV1().Leases("ns").Get(context.Background(), "guide", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			holder, seconds := "", int32(0)
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			if l.Spec.LeaseDurationSeconds != nil {
				seconds = *l.Spec.LeaseDurationSeconds
			}
			wantHolder, wantSeconds := "one", int32(leaseDuration/time.Second)
			if release {
				wantHolder, wantSeconds = "", 1
			}
			if holder != wantHolder || seconds != wantSeconds {
				t.Errorf("ReleaseOnCancel=%v: the Lease names %q for %ds, want %q for %ds", release, holder, seconds, wantHolder, wantSeconds)
			}
			if !leader.everStarted || leader.stopped != 5*time.Second {
				t.Errorf("the leader started: %v, stopped at %v; want started, stopped at 5s", leader.everStarted, leader.stopped)
			}
			if standby.everStarted || standby.stopped != 5*time.Second {
				t.Errorf("the standby started: %v, stopped at %v; want OnStoppedLeading at 5s without OnStartedLeading", standby.everStarted, standby.stopped)
			}
		})
	}
}

// TestElectorRefusesDeadlinesOutOfOrder proves: `NewLeaderElector`
// refuses any but LeaseDuration > RenewDeadline > 1.2 × RetryPeriod.
func TestElectorRefusesDeadlinesOutOfOrder(t *testing.T) {
	s := newLeaseServer(func(time.Duration) bool { return false })
	for _, c := range []struct {
		lease, renew, retry time.Duration
		ok                  bool
	}{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, true},
		{10 * time.Second, 10 * time.Second, 2 * time.Second, false},        // renew deadline = lease duration
		{15 * time.Second, 2400 * time.Millisecond, 2 * time.Second, false}, // = 1.2 retry periods
		{15 * time.Second, 2401 * time.Millisecond, 2 * time.Second, true},
	} {
		_, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: s.lock("one"), LeaseDuration: c.lease, RenewDeadline: c.renew, RetryPeriod: c.retry,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
		})
		if (err == nil) != c.ok {
			t.Errorf("lease %v, renew %v, retry %v: error %v, want accepted=%v", c.lease, c.renew, c.retry, err, c.ok)
		}
	}
}
