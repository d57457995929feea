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
	"strings"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock stores one record; its writes fail while failing is set.
type fakeLock struct {
	record  resourcelock.LeaderElectionRecord
	failing bool
}

func (l *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r := l.record
	return &r, nil, nil
}
func (l *fakeLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, ler)
}
func (l *fakeLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.failing {
		return errors.New("the API server is slow today")
	}
	l.record = ler
	return nil
}
func (l *fakeLock) RecordEvent(string) {}
func (l *fakeLock) Identity() string   { return "me" }
func (l *fakeLock) Describe() string   { return "fake" }
func renewal(holder string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, RenewTime: metav1.NewTime(time.Now())}
}

// The guard calls lose once the last successful renewal is older than the
// renew deadline: not before, however long the process has led, and only
// once. In a synctest bubble, so the times are exact: a release or a
// failed write counted as a renewal would move the loss by the half
// deadline that separates them from the last real renewal.
func TestGuardLosesAfterRenewDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const deadline = 200 * time.Millisecond
		lock := &fakeLock{}
		g := newGuard(lock, deadline)
		ctx := context.Background()
		if err := g.Create(ctx, renewal("me")); err != nil { // acquired
			t.Fatal(err)
		}
		lost := make(chan string, 2)
		g.lead(func(reason string) { lost <- reason })
		defer g.stop()

		// Renewals every deadline/4 keep it for several deadlines.
		for range 8 {
			time.Sleep(deadline / 4)
			if err := g.Update(ctx, renewal("me")); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case r := <-lost:
			t.Fatalf("lost (%s) while renewing", r)
		default:
		}
		// A release (no holder) is no renewal, nor is a failed write.
		last := time.Now()
		time.Sleep(deadline / 2)
		_ = g.Update(ctx, renewal(""))
		lock.failing = true
		_ = g.Update(ctx, renewal("me"))
		r := <-lost
		if after := time.Since(last); after != deadline {
			t.Errorf("lost %v after the last renewal, want exactly the renew deadline, %v", after, deadline)
		}
		if !strings.Contains(r, "renew deadline") {
			t.Errorf("reason %q", r)
		}
		select {
		case r := <-lost:
			t.Errorf("lost twice: %s", r)
		case <-time.After(2 * deadline):
		}
	})
}

// A read that names another holder is a loss at once: someone took the
// Lease over and may be writing now.
func TestGuardLosesWhenAnotherHolds(t *testing.T) {
	lock := &fakeLock{}
	g := newGuard(lock, time.Hour)
	ctx := context.Background()
	if err := g.Update(ctx, renewal("me")); err != nil {
		t.Fatal(err)
	}
	// A standby's reads never call lose: it is not armed.
	lock.record.HolderIdentity = "other"
	if _, _, err := g.Get(ctx); err != nil {
		t.Fatal(err)
	}
	lock.record.HolderIdentity = "me"
	lost := make(chan string, 1)
	g.lead(func(reason string) { lost <- reason })
	defer g.stop()
	if _, _, err := g.Get(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-lost:
		t.Fatalf("lost (%s) while the Lease names this process", r)
	default:
	}
	lock.record.HolderIdentity = "intruder"
	if _, _, err := g.Get(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-lost:
		if !strings.Contains(r, "intruder") {
			t.Errorf("reason %q does not name the new holder", r)
		}
	default:
		t.Fatal("not lost after reading another holder in the Lease")
	}
}
