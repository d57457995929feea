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

package shards

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// clock is a settable now for an observer.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func observerAt(c *clock, d time.Duration) *observer {
	o := newObserver(d)
	o.now = c.now
	return o
}

// shardLease is shard k of count of the controller "bar-controller", held
// by holder, renewed at renewed, with a lease of seconds.
func shardLease(k, count int, holder string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	s := Shard{k, count}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: ShardLeaseName("bar-controller", s), Namespace: "ns",
			Labels: leaseLabels("bar-controller", kindShard, count)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(seconds),
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// A shard Lease deleted while held stays live for a lease duration from
// the deletion: its holder works on until its next renewal recreates it.
// A member Lease goes at once (the garbage collector deletes it with its
// Pod).
func TestObserverKeepsADeletedShardLeaseLive(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	o := observerAt(c, 15*time.Second)
	shard := shardLease(0, 3, "a", c.t, 15)
	member := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: MemberLeaseName("bar-controller", "pod-a"), Namespace: "ns",
			Labels: leaseLabels("bar-controller", kindMember, 6)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")},
	}
	o.observe(shard)
	o.observe(member)
	c.t = c.t.Add(10 * time.Second)
	o.forget(shard)
	o.forget(member)
	c.t = c.t.Add(10 * time.Second) // 20 s after the last renewal, 10 after the deletion
	if v := o.view("bar-controller", "b", 6); !v.OtherCountHeld {
		t.Error("a shard Lease deleted 10 s ago, its holder renewing every few seconds until then, counts as unheld")
	}
	if v := o.view("bar-controller", "b", 6); len(v.Members) != 0 {
		t.Errorf("a deleted member Lease still counts: members %v", v.Members)
	}
	if _, ok := o.expired(shard.Name); ok {
		t.Error("a deleted Lease is offered to clearExpired")
	}
	c.t = c.t.Add(6 * time.Second)
	if v := o.view("bar-controller", "b", 6); v.OtherCountHeld {
		t.Error("a shard Lease deleted a lease duration ago still counts as held")
	}
}

// The Lease says its duration in whole seconds, truncated: a holder of
// 1.5 s writes 1. The observer takes the longer of that and its own.
func TestObserverTakesTheLongerDuration(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	o := observerAt(c, 1500*time.Millisecond)
	o.observe(shardLease(0, 3, "a", c.t, 1))
	c.t = c.t.Add(1200 * time.Millisecond)
	if v := o.view("bar-controller", "b", 6); !v.OtherCountHeld {
		t.Error("a Lease of 1.5 s, written as 1, counts as run out after 1.2 s")
	}
}

// A decision from the watch alone trusts that it is current. confirm
// reads the Leases as they are: a holder that renewed while the watch
// missed it is live again.
func TestConfirmSeesWhatTheWatchMissed(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	o := observerAt(c, 15*time.Second)
	o.observe(shardLease(0, 3, "a", c.t, 15))
	c.t = c.t.Add(20 * time.Second)
	if v := o.view("bar-controller", "b", 6); v.OtherCountHeld {
		t.Fatal("setup: the Lease the watch last saw 20 s ago is still live")
	}
	client := fake.NewClientset(shardLease(0, 3, "a", c.t.Add(-time.Second), 15))
	if err := o.confirm(context.Background(), client, testLease); err != nil {
		t.Fatal(err)
	}
	if v := o.view("bar-controller", "b", 6); !v.OtherCountHeld {
		t.Error("after confirm, a shard Lease renewed a second ago counts as unheld")
	}
}

// The same record read twice (a watch event, then a list) is not a
// change: a Lease whose holder died must not be judged renewed because
// it was read again (a comparison of the pointers to LeaseTransitions
// did once, and a dead replica's member Lease stayed live for good).
func TestObserverReadingAgainIsNoRenewal(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	o := observerAt(c, 15*time.Second)
	l := shardLease(0, 3, "a", c.t, 15)
	l.Spec.LeaseTransitions = ptr.To[int32](2)
	o.observe(l)
	c.t = c.t.Add(20 * time.Second)
	again := l.DeepCopy()
	o.observe(again)
	if v := o.view("bar-controller", "b", 6); v.OtherCountHeld {
		t.Error("a Lease unchanged for 20 s, read again, counts as live")
	}
}
