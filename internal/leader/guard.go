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

package leader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// guard watches the elector's Lease reads and writes, to tell work that it
// must stop writing as soon as this process can no longer be sure it
// leads, which client-go's elector tells too late. When its renewals fail,
// the elector gives up after the renew deadline, but it cancels the
// context it gave OnStartedLeading only after it has also tried to release
// the Lease (LeaderElector.renew, then the deferred cancel in
// LeaderElector.Run), and that try may take another renew deadline: the
// API server that made the renewals fail makes it wait too. A standby takes
// over after the lease duration, well within that.
//
// So the guard decides by itself, from the Lease as this process writes
// and reads it:
//   - the last renewal it wrote (its renewTime) is older than the renew
//     deadline: a standby may take over once it is older than the lease
//     duration, and the renew deadline is the margin before that;
//   - a read of the Lease names another holder: someone took it over, and
//     the new holder may be writing already.
type guard struct {
	resourcelock.Interface
	renewDeadline time.Duration

	mu      sync.Mutex
	renewed time.Time   // renewTime of this process's last successful write as holder
	timer   *time.Timer // while leading: fires renewDeadline after renewed
	lose    func(reason string)

	// uncertain: a write of the Lease ended on its context, so whether
	// the API server applied it is unknown (releaseStranded).
	uncertain atomic.Bool
}

func newGuard(lock resourcelock.Interface, renewDeadline time.Duration) *guard {
	return &guard{Interface: lock, renewDeadline: renewDeadline}
}

// lead arms the guard: lose is called once, when the Lease is lost.
func (g *guard) lead(lose func(reason string)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lose = lose
	if g.renewed.IsZero() {
		g.renewed = time.Now()
	}
	g.timer = time.AfterFunc(time.Until(g.renewed.Add(g.renewDeadline)), func() {
		g.lost("not renewed for the renew deadline")
	})
}

// stop disarms the guard.
func (g *guard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
	g.lose = nil
}

func (g *guard) lost(reason string) {
	g.mu.Lock()
	lose := g.lose
	g.lose = nil
	g.mu.Unlock()
	if lose != nil {
		lose(reason)
	}
}

// wrote notes a successful write of the Lease record.
func (g *guard) wrote(ler resourcelock.LeaderElectionRecord) {
	if ler.HolderIdentity != g.Identity() {
		return // a release
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.renewed = ler.RenewTime.Time
	if g.timer != nil && g.lose != nil {
		g.timer.Reset(time.Until(g.renewed.Add(g.renewDeadline)))
	}
}

func (g *guard) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ler, raw, err := g.Interface.Get(ctx)
	if err == nil && ler.HolderIdentity != g.Identity() {
		g.lost("the Lease names another holder: " + ler.HolderIdentity)
	}
	return ler, raw, err
}

func (g *guard) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := g.Interface.Create(ctx, ler)
	g.done(ctx, ler, err)
	return err
}

func (g *guard) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := g.Interface.Update(ctx, ler)
	g.done(ctx, ler, err)
	return err
}

func (g *guard) done(ctx context.Context, ler resourcelock.LeaderElectionRecord, err error) {
	switch {
	case err == nil:
		g.wrote(ler)
	case ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		g.uncertain.Store(true)
	}
}
