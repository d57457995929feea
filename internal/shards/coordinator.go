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
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/leader"
	"github.com/barcontroller/bar-controller/internal/metrics"
)

// Work is what runs for one shard while this process holds its Lease,
// with the two contexts of leader.Work: leading ends the moment the Lease
// is lost, shutdown when the shard is to be given up (a rebalance, a
// signal), after which work finishes what is in progress and returns.
// It calls synced once its caches have synced, for readiness.
type Work func(leading, shutdown context.Context, s Shard, synced func()) error

// Coordinator runs this replica's share of the shards: it renews a member
// Lease so that the others count it, watches every Lease of the
// controller, and takes and gives up shard Leases until each live replica
// holds its fair share (NewPlan). Every shard's work runs under
// leader.Run with that shard's Lease, so its writes are fenced exactly as
// a single leader's are.
type Coordinator struct {
	client kubernetes.Interface
	lease  leader.Options // the name is the prefix of every Lease
	count  int
	self   string
	work   Work
	obs    *observer
	log    klog.Logger

	mu      sync.Mutex
	runners map[int]*runner
	synced  bool // the Lease informer
}

// runner is one shard's leader.Run.
type runner struct {
	stop     context.CancelFunc // give the shard up (or stop contending)
	done     chan struct{}
	leading  bool
	ready    bool
	givingUp bool // stopped to rebalance
}

// New returns a Coordinator of count shards for the replica identity.
func New(client kubernetes.Interface, lease leader.Options, count int, identity string, work Work) *Coordinator {
	return &Coordinator{
		client: client, lease: lease, count: count, self: identity, work: work,
		obs:     newObserver(lease.LeaseDuration),
		runners: map[int]*runner{},
	}
}

// Run holds the member Lease and coordinates while it does. It returns
// when ctx ends, once every shard's work has finished and its Lease is
// released.
//
// pod, if known, is the replica's Pod: the member Lease is created owned
// by it, so that the garbage collector deletes it with the Pod, and a
// Deployment's rollouts do not leave one Lease behind per Pod they
// replaced. (Shard Leases are a fixed few, reused by whoever holds them.)
func (c *Coordinator) Run(ctx context.Context, replica string, pod *metav1.OwnerReference) error {
	c.log = klog.FromContext(ctx).WithValues("shards", c.count)
	member := c.lease
	member.LeaseName = MemberLeaseName(c.lease.LeaseName, replica)
	member.Identity = c.self
	member.Labels = leaseLabels(c.lease.LeaseName, kindMember, c.count)
	// The Leases are watched before this replica becomes a member: one
	// the others count, and leave its share to, must be able to take it
	// (a replica denied the watch would hold its share unheld for good).
	if err := canListLeases(ctx, c.client, c.lease); err != nil {
		return err
	}
	stopWatching, synced, err := watchLeases(ctx, c.client, c.lease, c.obs)
	if err != nil {
		return err
	}
	defer stopWatching()
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return nil // a signal before the Leases were seen: nothing was held
	}
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	if pod != nil {
		if err := createOwned(ctx, c.client, member, *pod); err != nil {
			return err
		}
	}
	return leader.Run(ctx, c.client, member, nil, c.coordinate)
}

// createOwned creates the Lease with no holder, owned by pod, unless it
// exists; the elector then finds it and acquires it.
func createOwned(ctx context.Context, client kubernetes.Interface, lease leader.Options, pod metav1.OwnerReference) error {
	_, err := client.CoordinationV1().Leases(lease.Namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease.LeaseName, Labels: lease.Labels, OwnerReferences: []metav1.OwnerReference{pod}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// coordinate runs while the member Lease is held. Losing it ends
// leading, and with it every shard's work is asked to finish, but not cut
// off: the shards' own Leases still fence their writes, and leader.Run
// returns only once coordinate has, after every shard's Lease is
// released.
func (c *Coordinator) coordinate(leading, shutdown context.Context) error {
	// Give every shard up on a signal, or when the member Lease is lost.
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	defer context.AfterFunc(shutdown, stop)()
	defer context.AfterFunc(leading, stop)()

	// Replicas that start together (a new install, a rollout) see each
	// other's member Leases within a renewal or two. A replica that acted
	// at once would see itself alone, take every shard, and hand most of
	// them on a moment later: wait two renewals first.
	settled := time.Now().Add(2 * c.lease.RetryPeriod)
	tick := time.NewTicker(c.lease.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-stopping.Done():
			return c.giveUpAll()
		case <-tick.C:
		case <-c.obs.changed:
		}
		if time.Now().After(settled) {
			c.step(stopping)
		}
	}
}

// step acts on one plan.
func (c *Coordinator) step(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.obs.view(c.lease.LeaseName, c.self, c.count)
	takenByOthers := make([]bool, c.count)
	for k, h := range v.Holders {
		takenByOthers[k] = h != "" && h != c.self
	}
	// This process's runners know better than the watch what it holds:
	// a shard it leads is held; one the watch says it holds but that no
	// runner leads yet (won a moment ago, its work not yet started; or a
	// release not yet seen) is neither free nor to give up.
	for k, h := range v.Holders {
		r := c.runners[k]
		switch {
		case r != nil && r.leading:
			v.Holders[k] = c.self
		case h == c.self:
			v.Holders[k] = c.self + " (released)"
		}
	}
	p := NewPlan(v)
	for _, k := range p.Release {
		// Its work finishes what is in flight first; the plans until then
		// name it again, and it is given up once.
		if r := c.runners[k]; r != nil && !r.givingUp {
			r.givingUp = true
			c.log.Info("Giving up a shard to rebalance", "shard", Shard{k, c.count}, "target", p.Target)
			r.stop()
		}
	}
	// Stop contending for a shard another replica took. Not for one that
	// merely left the plan: its elector may have won it this instant, and
	// would give it back at once (leader.Run releases a Lease won as it
	// was cancelled), a handoff for nothing.
	for k, r := range c.runners {
		if !r.leading && takenByOthers[k] {
			r.stop()
		}
	}
	for _, k := range p.Take {
		if c.runners[k] == nil {
			c.start(ctx, Shard{k, c.count})
		}
	}
}

// clearExpired empties the holder of a shard's Lease that this process
// has watched go unrenewed for its lease duration. client-go's elector
// would wait that long again: it judges a holder from when it itself
// first read the Lease, and an elector starts only when a shard is to be
// taken. The update carries the resourceVersion that was judged, so a
// renewal since makes it fail (Conflict) and the elector waits as usual;
// the dead holder stopped writing at its renew deadline, shorter than the
// lease duration, as with a single Lease.
func (c *Coordinator) clearExpired(ctx context.Context, leaseName string) {
	lease, ok := c.obs.expired(leaseName)
	if !ok {
		return
	}
	cleared := lease.DeepCopy()
	cleared.Spec.HolderIdentity = nil
	_, err := c.client.CoordinationV1().Leases(lease.Namespace).Update(ctx, cleared, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) {
		c.log.V(2).Info("Could not clear an expired shard Lease; its elector waits it out", "lease", klog.KObj(lease), "err", err)
		return
	}
	if err == nil {
		c.log.Info("Cleared a shard Lease whose holder stopped renewing it", "lease", klog.KObj(lease), "holder", str(lease.Spec.HolderIdentity))
	}
}

// errOtherCount is the yield of a shard taken while replicas of another
// number of shards still held Leases.
var errOtherCount = errors.New("replicas with another number of shards still hold Leases")

// start contends for shard s. Called with c.mu held.
func (c *Coordinator) start(parent context.Context, s Shard) {
	ctx, stop := context.WithCancel(parent)
	r := &runner{stop: stop, done: make(chan struct{})}
	c.runners[s.Index] = r
	opts := c.lease
	opts.LeaseName = ShardLeaseName(c.lease.LeaseName, s)
	opts.Identity = c.self
	opts.Labels = leaseLabels(c.lease.LeaseName, kindShard, s.Count)
	go func() {
		defer close(r.done)
		defer stop()
		c.clearExpired(ctx, opts.LeaseName)
		since := time.Now()
		var ran atomic.Bool // passed the check (set on the elector's goroutine)
		err := leader.Run(klog.NewContext(ctx, c.log.WithValues("shard", s)), c.client, opts, nil,
			func(leading, shutdown context.Context) error {
				c.setLeading(r, true)
				defer c.setLeading(r, false)
				// Given up before the check passed (a plan, a signal):
				// stop waiting for it.
				checking, stopChecking := context.WithCancel(leading)
				defer context.AfterFunc(shutdown, stopChecking)()
				err := c.check(checking, opts.LeaseName, since)
				stopChecking()
				if err != nil && shutdown.Err() != nil {
					return nil // given up while checking: nothing ran
				}
				if err != nil {
					return err
				}
				if shutdown.Err() != nil {
					return nil // given up as the check passed: start nothing
				}
				ran.Store(true)
				metrics.SetShardHeld(s.String(), true)
				metrics.RecordShardHandoff(s.String(), "acquired")
				defer metrics.SetShardHeld(s.String(), false)
				return c.work(leading, shutdown, s, func() { c.setReady(r) })
			})
		switch {
		case errors.Is(err, leader.ErrLostLease):
			metrics.RecordShardHandoff(s.String(), "lost")
			c.log.Info("Lost a shard's Lease: its work stopped at once", "shard", s)
		case errors.Is(err, errOtherCount):
			metrics.RecordShardHandoff(s.String(), "yielded")
			c.log.Info("Gave a shard back at once: replicas with another --shards still run", "shard", s)
			// Not at once again: each replica that yields waits a
			// different while before it tries, so two that keep meeting
			// do not keep yielding to each other.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(rand.Int64N(int64(c.lease.RetryPeriod) * 2))):
			}
		case err != nil:
			c.log.Error(err, "A shard's work failed", "shard", s)
		}
		if err == nil && ran.Load() {
			metrics.RecordShardHandoff(s.String(), "released")
		}
		c.mu.Lock()
		if c.runners[s.Index] == r {
			delete(c.runners, s.Index)
		}
		c.mu.Unlock()
		c.obs.wake()
	}()
}

// check runs after a shard's Lease is won and before its work: once the
// watch shows this process as the holder by a write since it began to
// contend (since), it shows every Lease written before; if replicas of
// another number of shards hold one, this one yields. Of two that took
// overlapping shards at once, the later one's check sees the earlier, so
// they never both write.
func (c *Coordinator) check(ctx context.Context, leaseName string, since time.Time) error {
	err := waitFor(ctx, c.lease.RetryPeriod/4, func() bool { return c.obs.holds(leaseName, c.self, since) })
	if err != nil {
		return err
	}
	// The watch may be behind (a relist hands its items over one by one,
	// a broken watch is retried without one): a list, read after this
	// write was seen, shows every Lease written before it.
	if err := c.obs.confirm(ctx, c.client, c.lease); err != nil {
		return err
	}
	if c.obs.view(c.lease.LeaseName, c.self, c.count).OtherCountHeld {
		return errOtherCount
	}
	return nil
}

func waitFor(ctx context.Context, every time.Duration, cond func() bool) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// setLeading and setReady change the runner whose work calls them, not
// whichever runs the shard now: a runner's deferred calls must not touch
// the one after it.
func (c *Coordinator) setLeading(r *runner, leading bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.leading = leading
	if !leading {
		r.ready = false
	}
	c.obs.wake()
}

func (c *Coordinator) setReady(r *runner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.leading {
		r.ready = true
	}
}

// giveUpAll stops every shard's work and waits until each has released
// its Lease.
func (c *Coordinator) giveUpAll() error {
	c.mu.Lock()
	var done []chan struct{}
	for _, r := range c.runners {
		r.stop()
		done = append(done, r.done)
	}
	c.mu.Unlock()
	for _, d := range done {
		<-d
	}
	return nil
}
