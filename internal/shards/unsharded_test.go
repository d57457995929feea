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
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// unsharded is the unsharded controller, run as main.go runs it
// (RunUnsharded); its work counts as running every shard of count.
type unsharded struct {
	cancel context.CancelFunc
	done   chan error
	led    chan struct{} // closed when its work starts
}

func startUnsharded(t *testing.T, client *fake.Clientset, r *running, name string, count int) *unsharded {
	ctx, cancel := context.WithCancel(context.Background())
	u := &unsharded{cancel: cancel, done: make(chan error, 1), led: make(chan struct{})}
	lease := testLease
	lease.Identity = name + "_id"
	go func() {
		u.done <- RunUnsharded(ctx, client, client, lease, nil, func(leading, shutdown context.Context) error {
			r.mu.Lock()
			for k := range count {
				if other, ok := r.by[k]; ok {
					r.t.Errorf("shard %d: %s starts while %s runs it", k, name, other)
				}
				r.by[k] = name
			}
			r.mu.Unlock()
			close(u.led)
			select {
			case <-leading.Done():
			case <-shutdown.Done():
			}
			r.mu.Lock()
			for k := range count {
				delete(r.by, k)
			}
			r.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-u.done
	})
	return u
}

// stop stops it and fails the test if it failed.
func (u *unsharded) stop(t *testing.T) {
	t.Helper()
	u.cancel()
	if err := <-u.done; err != nil {
		t.Fatalf("the unsharded controller: %v", err)
	}
	u.done <- nil // for the cleanup
}

func (u *unsharded) waitLed(t *testing.T) {
	t.Helper()
	select {
	case <-u.led:
	case <-time.After(10 * time.Second):
		t.Fatal("the unsharded controller never started its work")
	}
}

// From one Lease to shards: while the unsharded controller holds its
// Lease (labelled by UnshardedLeaseLabels), a sharded replica takes
// nothing; once that controller stops and releases it, the replica takes
// every shard.
func TestCoordinatorWaitsForTheUnshardedLeader(t *testing.T) {
	client := newClient()
	r := &running{t: t, by: map[int]string{}}
	u := startUnsharded(t, client, r, "unsharded", 3)
	u.waitLed(t)

	sharded := startReplica(t, client, r, "sharded", 3)
	time.Sleep(10 * testLease.RetryPeriod) // several plans' worth
	if held := sharded.c.Held(); len(held) != 0 {
		t.Fatalf("took %v while the unsharded controller held its Lease", held)
	}
	u.stop(t)
	waitHeld(t, map[*replica]int{sharded: 3})
}

// From shards to one Lease, or an unsharded standby that wins the Lease
// after its leader left while sharded replicas already hold shards: it
// wins the free Lease, but its work waits, holding it, until the last
// shard is released. The sharded replica keeps what it holds meanwhile
// (the running tracker fails the test if both ever run a shard).
func TestUnshardedWaitsForTheShards(t *testing.T) {
	client := newClient()
	r := &running{t: t, by: map[int]string{}}
	sharded := startReplica(t, client, r, "sharded", 3)
	waitHeld(t, map[*replica]int{sharded: 3})

	u := startUnsharded(t, client, r, "unsharded", 3)
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(testLease.Namespace).Get(ctx, testLease.LeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "unsharded_id", nil
	})
	if err != nil {
		t.Fatal("the unsharded controller never won its free Lease")
	}
	time.Sleep(10 * testLease.RetryPeriod) // several checks' worth
	select {
	case <-u.led:
		t.Fatal("the unsharded controller started work while a sharded replica held shards")
	default:
	}
	if held := sharded.c.Held(); len(held) != 3 {
		t.Fatalf("the sharded replica holds %v, want all 3 kept while it runs", held)
	}
	sharded.cancel()
	<-sharded.done
	sharded.done <- nil // for its cleanup
	u.waitLed(t)
	u.stop(t)
}

// A grant from before the fence, without list and watch on Leases (the
// binary upgraded alone): the unsharded controller leads as it did
// before, unfenced, rather than crash-loop.
func TestUnshardedLeadsWithoutTheLeaseWatchGrant(t *testing.T) {
	client := newClient()
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New("no list"))
	})
	r := &running{t: t, by: map[int]string{}}
	u := startUnsharded(t, client, r, "unsharded", 1)
	u.waitLed(t)
	u.stop(t)
}
