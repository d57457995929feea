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

package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Three replicas, six shards, 5,000 Bars, with the API server's
// ShardedListAndWatch on: every Bar converges with one Deployment write
// and one status write, 2.00 a Bar (its Event is the third, counted by
// the bench), each replica caches a third of the Bars, give or take the
// hash's spread (25-42 %), the API server sends each replica its shards'
// Bars only (the client drops none), and no two replicas write one shard
// at once. Once in 50 namespaces; once with every Bar in one namespace, the
// case a shard key of namespace would put on one replica.
func TestShardsSplitTheBars(t *testing.T) {
	slow(t)
	for _, tc := range []struct {
		name       string
		namespaces int
	}{{"50 namespaces", 50}, {"one namespace", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newShardEnv(t, 5000, tc.namespaces, true)
			e.plain = true
			names := e.startBalanced(t, "replica-a", "replica-b", "replica-c")
			start := time.Now()
			e.createBars(t)
			e.waitConverged(t)
			record(t, "sharded: 3 replicas, 6 shards, 5,000 Bars, "+tc.name, time.Since(start))

			for _, name := range names {
				bars, kept, dropped, held := shardMetrics(t, e.replicas[name])
				share := bars / float64(e.n)
				t.Logf("%s: %v shards, %v Bars cached (%.1f %%), %v Bars received, %v dropped", name, held, bars, 100*share, kept, dropped)
				if share < 0.25 || share > 0.42 {
					t.Errorf("%s caches %.1f %% of the Bars, want 25-42 %%", name, 100*share)
				}
				if dropped != 0 {
					t.Errorf("%s received %v Bars outside its shards: the API server should have filtered them", name, dropped)
				}
			}
			// Idle: nothing more is written once converged, over five
			// renewals of every Lease (the plans run at each) and the
			// Deployments' last updates coming back as events.
			idleFrom := time.Now()
			time.Sleep(10 * time.Second)
			writes := e.replicaWrites(t)
			for _, w := range writes {
				if w.received.After(idleFrom) {
					t.Errorf("written once converged: %s %s by %s", w.what, w.key, w.replica)
				}
			}
			// Writes per Bar as the bench counts them (3.00 with the Event,
			// which is not counted here): a mean that rounds to
			// 2.00, its Deployment and its status; a rare retry (a Conflict
			// answered, then the write again) is within it and logged.
			for key, ws := range perBar(writes) {
				if len(ws) != 2 {
					t.Logf("%s written %d times: %v", key, len(ws), ws)
				}
			}
			if mean := float64(len(writes)) / float64(e.n); mean >= 2.005 {
				t.Errorf("%.3f writes per Bar (its Deployment and its status), want 2.00", mean)
			}
			checkFenced(t, writes, e.shardOf(t))
		})
	}
}

// A replica SIGKILLed while the Bars converge: its shards' Leases are
// not released, so the others wait each out (the lease duration, 15 s),
// then take the shards and finish them; within the lease duration and
// 5 s, and never two writers of one shard at once.
func TestShardReplicaKilled(t *testing.T) {
	slow(t)
	e := newShardEnv(t, 2000, 10, true)
	e.startBalanced(t, "replica-a", "replica-b", "replica-c")
	victim := e.replicas["replica-b"]
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.createBars(t)
	}()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return requests(victim.metrics(t), "POST", "PATCH") >= 50, nil
	})
	if err != nil {
		t.Fatalf("replica-b never wrote: %v", err)
	}
	_ = victim.Signal(syscall.SIGKILL)
	killed := time.Now()
	<-victim.Exited()
	// Its two shards go to the two others: three each.
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, _, _, a := shardMetrics(t, e.replicas["replica-a"])
		_, _, _, c := shardMetrics(t, e.replicas["replica-c"])
		return a+c == shardCount, nil
	})
	if err != nil {
		for _, name := range []string{"replica-a", "replica-c"} {
			t.Logf("%s's log ends:\n%s", name, e.replicas[name].LogTail(80))
		}
		t.Fatal("the killed replica's shards were never taken over")
	}
	// The bound, the issue's: the lease duration and 5 s. Where the time
	// goes: the others judge the dead replica's Leases expired a lease
	// duration after they last saw them renewed, which was up to one
	// renewal period (2 s) before the kill, so 13-15 s after it; their
	// next plan follows within a renewal period (a watch event or the
	// ticker), and taking a cleared Lease is one update. So at most about
	// 17 s. Measured: 13.6-15.7 s in 8 runs in a row (and 16.1 s before
	// that), beside nothing else. (A 63 s takeover in a fresh CI run was a
	// defect, fixed: a plan cancelled an elector the instant it won.)
	took := time.Since(killed)
	record(t, "sharded: a replica SIGKILLed, its shards taken over", took)
	if took > leaseDuration+5*time.Second {
		t.Errorf("its shards were taken over %v after the kill, want within the lease duration (%v) and 5 s", took, leaseDuration)
		for _, name := range []string{"replica-a", "replica-c"} {
			t.Logf("%s's log ends:\n%s", name, e.replicas[name].LogTail(80))
		}
	}
	<-done
	e.waitConverged(t)
	checkFenced(t, e.replicaWrites(t), e.shardOf(t))
}

// 3 → 1 → 3 replicas while Bars are created: the ones leaving hand their
// shards over (SIGTERM: syncs finish, Leases are released), the one left
// takes all six, the ones joining take two each back; no Bar is missed
// and no shard has two writers at once.
func TestShardsScaleDownAndUp(t *testing.T) {
	slow(t)
	e := newShardEnv(t, 3000, 10, true)
	e.startBalanced(t, "replica-a", "replica-b", "replica-c")
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.createBars(t)
	}()
	for _, name := range []string{"replica-b", "replica-c"} {
		if !e.replicas[name].Stop(30 * time.Second) {
			t.Errorf("%s did not stop on SIGTERM within 30 s", name)
		}
	}
	e.waitBalanced(t, "replica-a")
	e.startReplica(t, "replica-d")
	e.startReplica(t, "replica-e")
	e.waitBalanced(t, "replica-a", "replica-d", "replica-e")
	<-done
	e.waitConverged(t)
	checkFenced(t, e.replicaWrites(t), e.shardOf(t))
}

// With the gate off the API server ignores the shard selector and sends
// every replica every Bar: the replicas see it, filter on the client,
// say so in a metric, and converge as they would have.
func TestShardsWithoutTheGate(t *testing.T) {
	slow(t)
	e := newShardEnv(t, 2000, 10, false)
	names := e.startBalanced(t, "replica-a", "replica-b", "replica-c")
	e.createBars(t)
	e.waitConverged(t)
	for _, name := range names {
		bars, kept, dropped, _ := shardMetrics(t, e.replicas[name])
		ignored, _ := e.replicas[name].metrics(t).Value("bar_controller_shard_selector_ignored", nil)
		if ignored != 1 || dropped == 0 {
			t.Errorf("%s: selector ignored %v, %v Bars dropped: the fallback did not notice the API server", name, ignored, dropped)
		}
		if share := bars / float64(e.n); share < 0.25 || share > 0.42 {
			t.Errorf("%s caches %.1f %% of the Bars, want 25-42 %%", name, 100*share)
		}
		t.Logf("%s: %v cached, %v kept, %v dropped", name, bars, kept, dropped)
	}
	checkFenced(t, e.replicaWrites(t), e.shardOf(t))
}
