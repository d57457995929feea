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

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// An election cancelled while its acquiring write is in flight: the API
// server applies the write, the client sees only its context's error.
// client-go's elector then returns without releasing (it never saw itself
// win), and Run must release the Lease that names this process, or every
// other replica waits out its lease duration.
func TestRunReleasesALeaseWonAsItWasCancelled(t *testing.T) {
	opts := Options{Enabled: true, LeaseName: "bar-controller", Namespace: "ns", Identity: "me",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		create := a.(k8stesting.CreateAction)
		if err := client.Tracker().Create(a.GetResource(), create.GetObject(), a.GetNamespace()); err != nil {
			return true, nil, err
		}
		cancel() // the answer is lost: the caller's context ended first
		return true, nil, context.Canceled
	})
	work := func(context.Context, context.Context) error {
		t.Error("work ran: the elector cannot have seen itself win")
		return nil
	}
	if err := Run(ctx, client, opts, nil, work); err != nil {
		t.Fatalf("Run returned %v, want nil (stopped before leading)", err)
	}
	lease, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "bar-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := holderOf(lease); holder != "" {
		t.Errorf("the Lease names %q after Run returned; want it released", holder)
	}
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
