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
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
)

// TestStandbyCannotSeeARenewalWithinTheSameSecond proves: a standby
// counts the lease duration from the last change of the Lease it
// observed, and it compares the record as resourcelock serialises it,
// whose times are metav1.Time, whole seconds. A renewal in the same
// second as the record the standby already saw is no change to it, so
// it takes the Lease one lease duration after it first saw that record,
// before the holder's last renewal has expired; a renewal in the next
// second is seen, and counted from.
//
// The standby tries every 100-220 ms (RetryPeriod 100 ms, jittered by
// 1.2), so within a lease of 3 s the two cases cannot overlap: taken in
// [3 s, 3.22 s) when the renewal at 0.9 s went unseen (the first try, at
// 0 s, saw the record), in [4 s, 4.44 s) when the one at 1 s was seen
// (at the next try, and counted from there to the first try after). The
// bubble's clock starts on a whole second.
func TestStandbyCannotSeeARenewalWithinTheSameSecond(t *testing.T) {
	const (
		lease = 3 * time.Second
		retry = 100 * time.Millisecond
	)
	for _, c := range []struct {
		renewAt       time.Duration
		seen          bool
		after, before time.Duration
	}{
		{renewAt: 900 * time.Millisecond, seen: false, after: lease, before: lease + 220*time.Millisecond},
		{renewAt: time.Second, seen: true, after: time.Second + lease, before: time.Second + lease + 440*time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			if !start.Equal(start.Truncate(time.Second)) {
				t.Fatalf("the bubble's clock starts at %v, not on a whole second", start)
			}
			s := newLeaseServer(func(time.Duration) bool { return false })
			leases := s.client.CoordinationV1().Leases("ns")
			// The holder, which the test plays: it took the Lease at 0 s,
			// renews once at c.renewAt, and is gone after that.
			held := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "guide"},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To("gone"),
					LeaseDurationSeconds: ptr.To(int32(lease / time.Second)),
					AcquireTime:          ptr.To(metav1.NewMicroTime(start)),
					RenewTime:            ptr.To(metav1.NewMicroTime(start)),
				},
			}
			if _, err := leases.Create(context.Background(), held, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			taken := make(chan time.Duration, 1)
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: s.lock("standby"), LeaseDuration: lease, RenewDeadline: 2 * time.Second, RetryPeriod: retry,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { taken <- time.Since(start) },
					OnStoppedLeading: func() {},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			go le.Run(ctx)

			time.Sleep(c.renewAt) // fake time: the bubble's clock
			l, err := leases.Get(context.Background(), "guide", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			expires := c.renewAt + lease

			at := <-taken
			if at < c.after || at >= c.before {
				t.Errorf("renewed at %v (seen: %v): the standby took the Lease at %v, want in [%v, %v)", c.renewAt, c.seen, at, c.after, c.before)
			}
			if early := at < expires; early == c.seen {
				t.Errorf("renewed at %v: taken at %v, %v after that renewal expired; want before it exactly when the renewal is in the second of the record already seen", c.renewAt, at, at-expires)
			}
			cancel()
			synctest.Wait()
		})
	}
}
