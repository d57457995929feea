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
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// What Run returns is why the process exits: the work's own error when it
// failed by itself (ErrLostLease would send an operator after the Lease,
// and the work's cause would be lost), nil after a signal, ErrLostLease
// only for a Lease lost while work ran (test/faults' TestNoWritesAfterLeaseLost
// drives that one against a real API server). The Lease lives in a fake
// clientset: what is tested is which answer Run gives, not the Lease.
func TestRunReportsWhyWorkEnded(t *testing.T) {
	opts := Options{Enabled: true, LeaseName: "bar-controller", Namespace: "ns",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 100 * time.Millisecond}
	failed := errors.New("caches never synced")
	for name, tc := range map[string]struct {
		work   Work
		signal bool
		want   error
	}{
		"work failed by itself": {
			work: func(context.Context, context.Context) error { return failed },
			want: failed,
		},
		"work ended on a signal": {
			work: func(_, shutdown context.Context) error {
				<-shutdown.Done()
				return nil
			},
			signal: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			started := make(chan struct{})
			work := func(leading, shutdown context.Context) error {
				close(started)
				return tc.work(leading, shutdown)
			}
			done := make(chan error, 1)
			go func() { done <- Run(ctx, fake.NewClientset(), opts, nil, work) }()
			// Hang bounds: the Lease is free, so it is won at once.
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("work never started")
			}
			if tc.signal {
				cancel()
			}
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Errorf("Run returned %v, want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
		})
	}
}
