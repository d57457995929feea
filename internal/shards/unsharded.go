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
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/leader"
)

// RunUnsharded runs work as the unsharded controller (--shards=1) does,
// under its one Lease, and fences it against sharded replicas of the same
// controller both ways.
//
// The Lease is labelled a shard Lease of count 1 (UnshardedLeaseLabels),
// so that sharded replicas take nothing while it is live. And once this
// process wins it, work waits, holding it, until its watch of the Leases
// shows this process's own write and no live shard Lease of another
// count, and a list of them agrees.
// Of an unsharded and a sharded replica that win at nearly the same time,
// the later one's check then sees the earlier's Lease: the sharded one
// gives its shard back, this one keeps waiting. It waits rather than
// gives the Lease up: the sharded replicas are already held off by it,
// and a Pod that exited here would only restart into the same wait.
//
// That covers a rollout either way: a standby of the unsharded
// Deployment that wins the Lease after its leader left, while sharded
// replicas already hold shards, writes nothing until they are gone; and
// the unsharded controller that replaces sharded replicas starts once the
// last of them has released its shards.
//
// client holds the Lease; watch (another client, not one whose requests
// go first as the renewals' do) watches and lists the Leases.
func RunUnsharded(ctx context.Context, client, watch kubernetes.Interface, lease leader.Options,
	watchdog *leaderelection.HealthzAdaptor, work leader.Work) error {
	if lease.Identity == "" {
		id, err := leader.NewIdentity()
		if err != nil {
			return err
		}
		lease.Identity = id
	}
	lease.Labels = UnshardedLeaseLabels(lease.LeaseName)
	since := time.Now()
	return leader.Run(ctx, client, lease, watchdog, func(leading, shutdown context.Context) error {
		if err := canListLeases(leading, watch, lease); err != nil {
			// A grant from before the fence (artifacts/install/rbac.yaml
			// gives list and watch now): a binary upgraded on its own.
			// Run as before rather than crash-loop; only the sharded
			// replicas' half of the fence holds.
			klog.FromContext(ctx).Error(err, "Running without the fence against sharded replicas: do not run replicas with --shards beside this one until the grant is updated")
			return work(leading, shutdown)
		}
		// Watched only from here: standbys ask nothing of the API server
		// for it, and once work starts the watch has done its job.
		obs := newObserver(lease.LeaseDuration)
		stopWatching, synced, err := watchLeases(leading, watch, lease, obs)
		if err != nil {
			return err
		}
		checking, stopChecking := context.WithCancel(leading)
		defer context.AfterFunc(shutdown, stopChecking)()
		err = waitForShardsGone(checking, watch, obs, synced, lease, since)
		stopChecking()
		stopWatching()
		if err != nil || shutdown.Err() != nil {
			// The Lease lost (leader.Run says so) or a signal while
			// waiting: nothing ran.
			return nil
		}
		return work(leading, shutdown)
	})
}

// waitForShardsGone waits until the watch has seen this process hold the
// Lease by a write made since it began to contend and no live shard Lease
// of another count, and a list then confirms it. The watch is trusted to
// say when to ask, never to decide alone (observer.confirm). Until the
// watch has handed over its first list it says nothing; one that has not
// after a lease duration is passed over, and the lists decide.
func waitForShardsGone(ctx context.Context, client kubernetes.Interface, obs *observer, synced cache.InformerSynced,
	lease leader.Options, since time.Time) error {
	logger := klog.FromContext(ctx)
	began := time.Now()
	var waiting, unsynced bool
	var listErr string
	return waitFor(ctx, lease.RetryPeriod/4, func() bool {
		if !synced() {
			if time.Since(began) < lease.LeaseDuration {
				return false
			}
			if !unsynced {
				unsynced = true
				logger.Info("Holding the Lease, but the watch of this controller's Leases has not synced: deciding by listing them", "lease", klog.KRef(lease.Namespace, lease.LeaseName))
			}
		} else if !obs.holds(lease.LeaseName, lease.Identity, since) || obs.view(lease.LeaseName, lease.Identity, 1).OtherCountHeld {
			if !waiting && obs.holds(lease.LeaseName, lease.Identity, since) {
				waiting = true
				logger.Info("Holding the Lease, but sharded replicas of this controller still hold shards: waiting for them to release them before starting work",
					"lease", klog.KRef(lease.Namespace, lease.LeaseName))
			}
			return false
		}
		if err := obs.confirm(ctx, client, lease); err != nil {
			if err.Error() != listErr {
				listErr = err.Error()
				logger.Error(err, "Holding the Lease, but could not list this controller's Leases to see whether shards are held: trying again", "lease", klog.KRef(lease.Namespace, lease.LeaseName))
			}
			return false
		}
		if !obs.holds(lease.LeaseName, lease.Identity, since) || obs.view(lease.LeaseName, lease.Identity, 1).OtherCountHeld {
			return false
		}
		if waiting {
			logger.Info("The sharded replicas have released their shards: starting work")
		}
		return true
	})
}
