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
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/barcontroller/bar-controller/internal/leader"
)

// Fast Leases for the fake API server (the real one: test/faults).
var testLease = leader.Options{
	LeaseName: "bar-controller", Namespace: "ns",
	LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
}

// replica is one Coordinator and the shards its work ran for.
type replica struct {
	name   string
	c      *Coordinator
	cancel context.CancelFunc
	done   chan error
}

// running records which replica runs each shard's work, and fails the
// test if two ever run one shard at once.
type running struct {
	t  *testing.T
	mu sync.Mutex
	by map[int]string
}

func (r *running) work(name string) Work {
	return func(leading, shutdown context.Context, s Shard, synced func()) error {
		r.mu.Lock()
		if other, ok := r.by[s.Index]; ok {
			r.t.Errorf("shard %v: %s starts while %s runs it", s, name, other)
		}
		r.by[s.Index] = name
		r.mu.Unlock()
		synced()
		select {
		case <-leading.Done():
		case <-shutdown.Done():
		}
		r.mu.Lock()
		delete(r.by, s.Index)
		r.mu.Unlock()
		return nil
	}
}

// newClient is a fake API server that, like the real one, gives every
// write of a Lease a new resourceVersion and refuses an update of a Lease
// that changed since it was read (Conflict): the electors' mutual
// exclusion rests on it, and the fake's tracker does neither.
func newClient() *fake.Clientset {
	client := fake.NewClientset()
	var (
		mu sync.Mutex
		rv int
	)
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	write := func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l := a.(interface{ GetObject() runtime.Object }).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, err := client.Tracker().Get(gvr, l.Namespace, l.Name)
		switch {
		case a.GetVerb() == "create" && err == nil:
			return true, nil, apierrors.NewAlreadyExists(gvr.GroupResource(), l.Name)
		case a.GetVerb() == "update" && err != nil:
			return true, nil, err
		case a.GetVerb() == "update" && cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion:
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("the object has been modified"))
		}
		rv++
		l.ResourceVersion = strconv.Itoa(rv)
		if a.GetVerb() == "create" {
			err = client.Tracker().Create(gvr, l, l.Namespace)
		} else {
			err = client.Tracker().Update(gvr, l, l.Namespace)
		}
		return true, l, err
	}
	client.PrependReactor("create", "leases", write)
	client.PrependReactor("update", "leases", write)
	return client
}

func startReplica(t *testing.T, client *fake.Clientset, r *running, name string, count int) *replica {
	ctx, cancel := context.WithCancel(context.Background())
	c := New(client, testLease, count, name+"_id", r.work(name))
	rep := &replica{name: name, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rep.done <- c.Run(ctx, name, nil) }()
	t.Cleanup(func() {
		cancel()
		<-rep.done
	})
	return rep
}

func waitHeld(t *testing.T, want map[*replica]int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = ""
		ok := true
		for r, n := range want {
			held := r.c.Held()
			last += fmt.Sprintf(" %s:%v", r.name, held)
			ok = ok && len(held) == n && r.c.Ready() == nil
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("shares never reached %v:%s", want, last)
	}
}

// Three replicas share six shards two each; one that leaves gives its
// shards up and the two left take three each; one that joins gets two
// back. No shard's work ever runs twice at once.
func TestCoordinatorsShareTheShards(t *testing.T) {
	client := newClient()
	r := &running{t: t, by: map[int]string{}}
	a := startReplica(t, client, r, "a", 6)
	b := startReplica(t, client, r, "b", 6)
	c := startReplica(t, client, r, "c", 6)
	waitHeld(t, map[*replica]int{a: 2, b: 2, c: 2})

	b.cancel()
	if err := <-b.done; err != nil {
		t.Fatalf("b: %v", err)
	}
	b.done <- nil // for its cleanup
	waitHeld(t, map[*replica]int{a: 3, c: 3})

	d := startReplica(t, client, r, "d", 6)
	waitHeld(t, map[*replica]int{a: 2, c: 2, d: 2})
	if got := d.c.Status(); got == "" {
		t.Error("no status")
	}
}

// A replica configured with another number of shards takes nothing while
// the Leases of the first count are live, and everything once they are
// gone.
func TestCoordinatorWaitsForAnotherCount(t *testing.T) {
	client := newClient()
	r := &running{t: t, by: map[int]string{}}
	old := startReplica(t, client, r, "old", 3)
	waitHeld(t, map[*replica]int{old: 3})
	nu := startReplica(t, client, r, "new", 6)
	// Several plans' worth: it must still hold nothing.
	time.Sleep(10 * testLease.RetryPeriod)
	if held := nu.c.Held(); len(held) != 0 {
		t.Fatalf("took %v while shards of another count were held", held)
	}
	old.cancel()
	<-old.done
	old.done <- nil
	waitHeld(t, map[*replica]int{nu: 6})
}
