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

// Package leader runs the controller's work only while this process holds
// a coordination.k8s.io Lease, so that of several replicas exactly one writes.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// ErrLostLease is returned when another replica took the lease away. The
// process exits non-zero and its Pod restarts as a standby: continuing
// would mean two replicas writing at once.
var ErrLostLease = errors.New("lost the leader election lease")

// Options are the --leader-elect-* flags.
type Options struct {
	Enabled       bool
	LeaseName     string
	Namespace     string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// Identity names this process in the Lease; empty: ReplicaName and a
	// random suffix (NewIdentity). A process that holds several Leases
	// (one per shard) names itself the same in each.
	Identity string
	// Labels are set on the Lease when this process creates or updates it,
	// so that the Leases of one kind can be listed and watched together.
	Labels map[string]string
}

// Work is what runs while this process holds the Lease. Its two contexts
// end for different reasons, and work must treat them differently:
//
//   - leading ends the moment the Lease is lost. Another replica may be
//     writing already, so every API call in progress must be cancelled at
//     once: a write after that could undo the new leader's.
//   - shutdown ends on a signal. Work stops taking new work, lets what is in
//     progress finish, and returns; only then is the Lease released.
type Work func(leading, shutdown context.Context) error

// Run runs work only while this process holds the Lease. Standbys
// wait in le.Run with warm informers, so a takeover starts syncing at once.
//
// The order on shutdown matters: a signal first stops work (syncs in
// progress finish), and only then is the Lease released, so that a standby
// never starts while this process is still writing.
//
// A Lease is lost when a read of it names another holder, or when this
// process has not renewed it for the renew deadline (see guard). The renew
// deadline is shorter than the lease duration, which a standby waits out
// before it takes over, so work stopped at once then has stopped before a
// new leader begins.
func Run(ctx context.Context, client kubernetes.Interface, opts Options,
	watchdog *leaderelection.HealthzAdaptor, work Work) error {
	logger := klog.FromContext(ctx)
	identity := opts.Identity
	if identity == "" {
		var err error
		if identity, err = NewIdentity(); err != nil {
			return err
		}
	}
	lock := newGuard(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.LeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		Labels:     opts.Labels,
	}, opts.RenewDeadline)

	// The elector gets a context of its own: cancelling it releases the lease.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	// leading and stopping decide, under mu, who releases the lease on a
	// signal: a standby leaves at once; a leader only after its work ends.
	// Deciding both under one lock closes the window in which a signal and
	// winning the election cross, and the lease would go while work starts.
	//
	// workEnded says work returned by itself, with its context still
	// live: a failure of its own (caches that never synced), reported as
	// itself. Without it, the elector's end that follows (stopElector
	// below) would look like a lost Lease.
	var (
		mu                           sync.Mutex
		leading, stopping, workEnded bool
		lost                         atomic.Bool
	)
	workDone := make(chan error, 1)
	defer context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopping = true
		if !leading {
			stopElector()
		}
	})()

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            opts.LeaseName,
		LeaseDuration:   opts.LeaseDuration,
		RenewDeadline:   opts.RenewDeadline,
		RetryPeriod:     opts.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				mu.Lock()
				if stopping { // won the lease just as the signal came
					mu.Unlock()
					return
				}
				leading = true
				mu.Unlock()
				logger.Info("Became leader; starting work", "lease", klog.KRef(opts.Namespace, opts.LeaseName), "identity", identity)
				// workCtx ends when the Lease is lost (the guard knows first;
				// the elector ends leaderCtx later, see guard) or on
				// stopElector below. A signal (ctx) does not end it, so the
				// syncs it lets finish may still write.
				workCtx, lose := context.WithCancel(leaderCtx)
				defer lose()
				lock.lead(func(reason string) {
					logger.Info("Lost the lease: stopping every write at once", "reason", reason)
					lost.Store(true)
					lose()
				})
				defer lock.stop()
				err := work(workCtx, ctx)
				mu.Lock()
				workEnded = workCtx.Err() == nil
				mu.Unlock()
				workDone <- err
				stopElector() // work is done: now release the lease
			},
			OnStoppedLeading: func() {
				mu.Lock()
				defer mu.Unlock()
				// The elector gave up the Lease while work still ran: its
				// renewals failed.
				if leading && !stopping && !workEnded {
					lost.Store(true)
				}
			},
			OnNewLeader: func(id string) {
				if id != identity {
					logger.Info("Standing by; another replica leads", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	// Only leaderelection.RunOrDie connects a watchdog to its elector; with
	// le.Run it is ours to do, or /healthz never notices a stuck leader.
	if watchdog != nil {
		watchdog.SetLeaderElection(le)
	}
	logger.Info("Waiting to acquire the lease", "lease", klog.KRef(opts.Namespace, opts.LeaseName), "identity", identity)
	le.Run(electorCtx)
	mu.Lock()
	led := leading
	mu.Unlock()
	if !led {
		if lock.uncertain.Load() {
			releaseStranded(logger, lock, identity, opts.RenewDeadline)
		}
		return nil
	}
	// The elector returns on its own when its renewals fail, while work
	// may still be finishing on OnStartedLeading's goroutine (its context
	// is cancelled by now, so it writes nothing more). Wait for it: the
	// caller may start the same work again (internal/shards) or exit.
	err = <-workDone
	if lost.Load() {
		return ErrLostLease
	}
	return err
}

// releaseStranded empties the Lease if it names this process, which never
// led: client-go's elector, cancelled while its acquiring write was in
// flight, returns on the context's error without knowing whether the API
// server applied the write, and releases only a Lease it saw itself win
// (LeaderElector.release). Run calls it only after such a write (the
// guard's uncertain), so a standby's shutdown asks the API server nothing. When the write did apply, the Lease names this
// process, unrenewed, until it runs out, and every other replica waits
// that long. A replica that holds a Lease per shard cancels contenders
// often (internal/shards), and the race is then a matter of time. The
// update carries the resourceVersion it read, so it fails on any change
// since: it can only empty a Lease nobody else has touched.
func releaseStranded(logger klog.Logger, lock resourcelock.Interface, identity string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil || rec.HolderIdentity != identity {
		return
	}
	now := metav1.NewTime(time.Now())
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	}); err != nil {
		logger.Info("Could not release a Lease won just as the election was cancelled; it runs out by itself", "lease", lock.Describe(), "err", err)
		return
	}
	logger.Info("Released a Lease won just as the election was cancelled", "lease", lock.Describe())
}

// NewIdentity names this process in a Lease: its ReplicaName plus a
// random suffix so a restarted process is not mistaken for its predecessor.
func NewIdentity() (string, error) {
	id, err := ReplicaName()
	if err != nil {
		return "", err
	}
	return id + "_" + string(uuid.NewUUID()), nil
}

// ReplicaName names this replica: the Pod name in a cluster (set from the
// downward API), else the host name.
func ReplicaName() (string, error) {
	if id := os.Getenv("POD_NAME"); id != "" {
		return id, nil
	}
	id, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no POD_NAME and no host name to name this replica: %w", err)
	}
	return id, nil
}

// DefaultNamespace is the namespace the process runs in, if known.
func DefaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(data))
	}
	return "default"
}
