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
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/internal/leader"
)

// The labels on every Lease of a sharded controller: which controller
// (its --leader-elect-lease-name), what kind of Lease, and the number of
// shards its writer was configured with.
const (
	leaseOfLabel   = "barcontroller.dev/lease-of"
	leaseKindLabel = "barcontroller.dev/lease-kind"
	shardsLabel    = "barcontroller.dev/shards"

	kindShard  = "shard"
	kindMember = "member"
)

// leaseLabels are the labels of one of this controller's Leases.
func leaseLabels(name, kind string, count int) map[string]string {
	return map[string]string{leaseOfLabel: name, leaseKindLabel: kind, shardsLabel: strconv.Itoa(count)}
}

// UnshardedLeaseLabels are the labels of the unsharded controller's one
// Lease (--shards=1): a shard Lease of count 1, so that replicas of any
// other count see it held and take nothing while it is (view's
// OtherCountHeld), as they do for shard Leases of another count. Going
// from one Lease to shards is then fenced like any change of count.
func UnshardedLeaseLabels(name string) map[string]string {
	return leaseLabels(name, kindShard, 1)
}

// ShardLeaseName is the Lease that shard s is held by. The number of
// shards is part of it: shard 1 of 3 and shard 1 of 6 are different Bars.
func ShardLeaseName(name string, s Shard) string {
	return name + "-shard-" + s.String()
}

// MemberLeaseName is the Lease a replica renews while it runs, so that the
// others count it when they share the shards out.
func MemberLeaseName(name, replica string) string {
	return name + "-member-" + replica
}

// observer tells live Leases from dead ones the way client-go's elector
// does: by when this process saw a Lease change, not by the renew time
// written in it, so that clocks that disagree between replicas do not
// matter. A Lease is live while it names a holder and has changed within
// its lease duration; one this process has only just seen counts as
// changed now, so a replica that starts waits a whole lease duration
// before it believes a silent holder dead, as a standby does.
type observer struct {
	mu       sync.Mutex
	now      func() time.Time
	seen     map[string]observation
	changed  chan struct{} // a wake-up, dropped when one is pending
	duration time.Duration // used where a Lease gives none
}

type observation struct {
	lease   *coordinationv1.Lease
	at      time.Time
	deleted bool // kept after its deletion (forget)
}

func newObserver(duration time.Duration) *observer {
	return &observer{now: time.Now, seen: map[string]observation{}, changed: make(chan struct{}, 1), duration: duration}
}

// handler keeps the observer up to date from an informer on the Leases.
func (o *observer) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.observe(obj) },
		UpdateFunc: func(_, obj any) { o.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				o.forget(l)
			}
		},
	}
}

func (o *observer) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	o.mu.Lock()
	old, known := o.seen[l.Name]
	if !known || !sameRecord(old.lease, l) {
		o.seen[l.Name] = observation{lease: l, at: o.now()}
	}
	o.mu.Unlock()
	o.wake()
}

// forget records a Lease's deletion. A member Lease is gone at once (the
// garbage collector deletes it with its Pod). A shard Lease that named a
// holder stays as it was, live for another lease duration: its holder
// does not know yet, works on, and its next renewal recreates the Lease
// (client-go's elector creates a Lease it finds missing, and counts that
// as renewed), so a deletion, by hand or otherwise, must not open the
// fence for anyone else before that holder has given up.
func (o *observer) forget(l *coordinationv1.Lease) {
	o.mu.Lock()
	if l.Labels[leaseKindLabel] == kindShard && str(l.Spec.HolderIdentity) != "" {
		o.seen[l.Name] = observation{lease: l, at: o.now(), deleted: true}
	} else {
		delete(o.seen, l.Name)
	}
	o.mu.Unlock()
	o.wake()
}

func (o *observer) wake() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// sameRecord says whether a Lease still holds the record it held: the
// holder, and the renew and acquire times it writes at every renewal.
func sameRecord(a, b *coordinationv1.Lease) bool {
	return str(a.Spec.HolderIdentity) == str(b.Spec.HolderIdentity) &&
		a.Spec.RenewTime.Equal(b.Spec.RenewTime) && a.Spec.AcquireTime.Equal(b.Spec.AcquireTime) &&
		ptr.Equal(a.Spec.LeaseTransitions, b.Spec.LeaseTransitions)
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// liveHolder is the Lease's holder if it is live, else "".
func (o *observer) liveHolder(ob observation, now time.Time) string {
	holder := str(ob.lease.Spec.HolderIdentity)
	if holder == "" {
		return ""
	}
	// The longer of this process's lease duration and the holder's: the
	// Lease says it in whole seconds, truncated (a 1.5 s duration reads
	// 1 s, the renew deadline itself), and the holder may have been
	// started with another.
	d := o.duration
	if s := ob.lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		d = max(d, time.Duration(*s)*time.Second)
	}
	if now.After(ob.at.Add(d)) {
		return ""
	}
	return holder
}

// view is what the Leases say to the replica self, configured with count
// shards under the name name: the live members of its count, the live
// holder of each of its shards, and whether shards of another count are
// held.
func (o *observer) view(name, self string, count int) View {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	v := View{Self: self, Holders: make([]string, count)}
	byName := map[string]int{}
	for _, s := range All(count) {
		byName[ShardLeaseName(name, s)] = s.Index
	}
	if count == 1 {
		// The unsharded controller (RunUnsharded): its one Lease, named
		// name itself, is its only shard.
		byName = map[string]int{name: 0}
	}
	want := strconv.Itoa(count)
	for leaseName, ob := range o.seen {
		l := ob.lease.Labels
		if l[leaseOfLabel] != name {
			continue
		}
		holder := o.liveHolder(ob, now)
		if holder == "" {
			continue
		}
		switch l[leaseKindLabel] {
		case kindMember:
			if l[shardsLabel] == want {
				v.Members = append(v.Members, holder)
			}
		case kindShard:
			if k, ok := byName[leaseName]; ok && l[shardsLabel] == want {
				v.Holders[k] = holder
			} else {
				v.OtherCountHeld = true
			}
		}
	}
	return v
}

// holds says whether the observer has seen self hold the Lease by a
// write made at since or later: then everything the API server had
// committed before that write is in the observer too (a watch delivers
// in resourceVersion order). The time tells this runner's write from an
// older record that names this process too (an earlier tenure whose
// release failed); the elector writes renewTime from this process's own
// clock at every write, and the API server keeps it to the microsecond.
func (o *observer) holds(leaseName, self string, since time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.seen[leaseName]
	return ok && str(ob.lease.Spec.HolderIdentity) == self && ob.lease.Spec.RenewTime != nil &&
		!ob.lease.Spec.RenewTime.Time.Before(since.Truncate(time.Microsecond))
}

// expired returns the Lease if it names a holder that is no longer live,
// as this process judged it: unchanged for its lease duration.
func (o *observer) expired(leaseName string) (*coordinationv1.Lease, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob, ok := o.seen[leaseName]
	if !ok || ob.deleted || str(ob.lease.Spec.HolderIdentity) == "" || o.liveHolder(ob, o.now()) != "" {
		return nil, false
	}
	return ob.lease, true
}

// confirm lists the controller's Leases, a read as current as the API
// server has, and observes each. A decision made from the watch alone
// trusts that the watch is current; a watch that broke and is being
// retried (client-go backs off up to 30 s without relisting), or a
// relist whose items are still being handed over one by one, is not. A
// Lease the watch still holds but the list lacks stays as observed: a
// missed deletion only keeps the fence closed a little longer.
func (o *observer) confirm(ctx context.Context, client kubernetes.Interface, lease leader.Options) error {
	list, err := client.CoordinationV1().Leases(lease.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{leaseOfLabel: lease.LeaseName}.String()})
	if err != nil {
		return err
	}
	for i := range list.Items {
		o.observe(&list.Items[i])
	}
	return nil
}

// canListLeases asks once for the Leases that watchLeases watches: a
// grant without list and watch would leave the informer retrying forever,
// standing by in silence. Only a refusal is an error; anything else the
// informer retries.
func canListLeases(ctx context.Context, client kubernetes.Interface, lease leader.Options) error {
	_, err := client.CoordinationV1().Leases(lease.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{leaseOfLabel: lease.LeaseName}.String(), Limit: 1})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("the controller watches its Leases in namespace %s to fence its writes, and may not list them "+
			"(artifacts/install/rbac.yaml grants list and watch on Leases): %w", lease.Namespace, err)
	}
	return nil
}

// watchLeases feeds obs from an informer on the Leases of the controller
// named lease.LeaseName (its label, leaseOfLabel). It does not wait:
// synced says when obs has been handed every Lease of the initial list
// (the handler's own HasSynced: the informer's says only that its store
// has them). The informer runs until stop is called, not until ctx ends:
// a replica's Leases are released after the signal, and the fence is
// judged until then.
func watchLeases(ctx context.Context, client kubernetes.Interface, lease leader.Options, obs *observer) (stop func(), synced cache.InformerSynced, err error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(lease.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{leaseOfLabel: lease.LeaseName}.String()
		}))
	informer := factory.Coordination().V1().Leases().Informer()
	reg, err := informer.AddEventHandler(obs.handler())
	if err != nil {
		return nil, nil, err
	}
	informerCtx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	factory.Start(informerCtx.Done())
	return func() {
		stopInformer()
		factory.Shutdown()
	}, reg.HasSynced, nil
}
