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

package webhookcert

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

// cutOff gives k clients whose every request fails, as a replica's do
// when it cannot reach the API server, and returns a function that gives
// it back the cluster's.
func (c *cluster) cutOff(k *Keeper) (restore func()) {
	down := func(core.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	}
	kube, ext := k8sfake.NewClientset(), extfake.NewClientset()
	kube.PrependReactor("*", "*", down)
	ext.PrependReactor("*", "*", down)
	k.Kube, k.Extensions = kube, ext
	return func() { k.Kube, k.Extensions = c.kube, c.ext }
}

// trusted says whether the CRD's caBundle holds the CA of the pair k
// serves: whether the API server can call it.
func (c *cluster) trusted(t *testing.T, k *Keeper) bool {
	t.Helper()
	return slices.ContainsFunc(c.bundle(t), servedCA(t, k).Equal)
}

// Two replicas settle; then a rotates (the served pair must cover a
// name it did not: a rollout that adds one) and b, after a last pass at
// some point of the rotation, cannot reach the API server for a while.
// a passes every period; b at the times given, then every 5 s, as Run
// retries a failed pass. b must never be ready while the CRD's caBundle
// does not trust the pair it serves: once a retires the CA b still
// serves, the Service would send b the API server's reviews, and every
// one would fail the TLS handshake. Nor may it go unready for a failed
// pass (make before break): it stays ready through the first period of
// failures, and is ready again on its first pass back, serving the new
// pair. The last case is the tightest: b's last pass finds the next pair
// 5 s before a may promote it.
//
// Before the fix b stayed ready to the end, its last pass's verdict kept
// for good, 5 minutes after its CA had left the bundle.
func TestCutOffReplicaGoesUnreadyBeforeItsCALeaves(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bPasses []time.Duration // b's passes before it is cut off
	}{
		{"cut off before the rotation", []time.Duration{0}},
		{"cut off once the next pair waits", []time.Duration{0, 55 * time.Second, 115 * time.Second}},
		{"cut off just before the promotion", []time.Duration{0, 6*time.Minute + 55*time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster()
			start := time.Now().Truncate(time.Second)
			now := start
			a, b := c.replica(&now), c.replica(&now)
			reconcile(t, a)
			reconcile(t, a)
			first := servedCA(t, a)
			a.Names = append(slices.Clone(dnsNames), "bar-controller-webhook.bar-controller")

			const step, back = 5 * time.Second, 20 * time.Minute
			last := tc.bPasses[len(tc.bPasses)-1]
			var restore func()
			var unreadyAt, retiredAt, readyAgainAt time.Duration
			readyAfterOnePeriod := false
			for elapsed := time.Duration(0); elapsed <= 30*time.Minute; elapsed += step {
				now = start.Add(elapsed)
				if elapsed > 0 && elapsed%a.period() == 0 {
					reconcile(t, a)
				}
				switch {
				case slices.Contains(tc.bPasses, elapsed):
					reconcile(t, b)
				case elapsed > last && elapsed < back:
					if restore == nil {
						restore = c.cutOff(b)
					}
					if err := b.Reconcile(context.Background()); err == nil {
						t.Fatalf("%v: b's pass succeeded while cut off", elapsed)
					}
				case elapsed >= back:
					if elapsed == back {
						restore()
					}
					reconcile(t, b)
				}
				if retiredAt == 0 && !slices.ContainsFunc(c.bundle(t), first.Equal) {
					retiredAt = elapsed
				}
				ready := b.Ready() == nil
				if ready && !c.trusted(t, b) {
					t.Fatalf("%v: b is ready serving a pair whose CA the CRD's caBundle no longer holds (retired at %v; b's last pass at %v, unready at %v)",
						elapsed, retiredAt, last, unreadyAt)
				}
				if elapsed == last+a.period()+step {
					readyAfterOnePeriod = ready
				}
				switch {
				case !ready && elapsed > last && unreadyAt == 0:
					unreadyAt = elapsed
				case ready && unreadyAt != 0 && readyAgainAt == 0:
					readyAgainAt = elapsed
				}
			}
			t.Logf("b's last pass at %v; b unready at %v, its CA retired at %v, b back at %v and ready at %v", last, unreadyAt, retiredAt, back, readyAgainAt)
			if !readyAfterOnePeriod {
				t.Errorf("b unready at %v, a period after its last pass: one late pass must not take a replica out", unreadyAt)
			}
			if retiredAt == 0 || unreadyAt == 0 || unreadyAt >= retiredAt {
				t.Errorf("b unready at %v, its CA retired at %v: want both, in that order", unreadyAt, retiredAt)
			}
			if readyAgainAt != back || servedCA(t, b).Equal(first) {
				t.Errorf("b ready again at %v, serving the old pair: %v; want ready at %v, on its first pass back, serving the new one",
					readyAgainAt, servedCA(t, b).Equal(first), back)
			}
		})
	}
}
