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
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// From one Lease to shards and back, with an unsharded replica that
// arrives while the shards are held (a rollout's surge Pod, an old Pod
// restarting): each side writes only once the other's last write was
// answered, in every shard at once (internal/shards/unsharded.go).
//
//  1. The unsharded controller leads and converges a third of the Bars;
//     three sharded replicas started beside it take nothing.
//  2. It leaves (SIGTERM releases its Lease): the sharded replicas take
//     the shards, two each, and converge the second third.
//  3. A second unsharded replica starts, wins the free Lease, and must
//     write nothing while the shards are held.
//  4. The sharded replicas leave: it starts and converges the last third.
func TestOneLeaseAndShardsTakeTurns(t *testing.T) {
	slow(t)
	e := newShardEnv(t, 1500, 10, true)
	third := e.n / 3
	sharded := []string{"replica-a", "replica-b", "replica-c"}

	first := e.startWith(t, "unsharded-a", 1)
	firstID := identityOf(t, first)
	e.waitLease(t, func(l *coordinationv1.Lease) bool { return holder(l) == firstID })
	for _, name := range sharded {
		e.startReplica(t, name)
	}
	e.createRange(t, 0, third)
	e.waitConvergedOf(t, third, false)
	for _, name := range sharded {
		if _, _, _, held := shardMetrics(t, e.replicas[name]); held != 0 {
			t.Errorf("%s holds %v shards while the unsharded controller leads", name, held)
		}
	}

	if !first.Stop(30 * time.Second) {
		t.Fatal("the unsharded leader did not stop on SIGTERM within 30 s")
	}
	e.waitBalanced(t, sharded...)

	second := e.startWith(t, "unsharded-b", 1)
	secondID := identityOf(t, second)
	e.waitLease(t, func(l *coordinationv1.Lease) bool { return holder(l) == secondID })
	e.createRange(t, third, 2*third)
	e.waitConvergedOf(t, 2*third, false)

	for _, name := range sharded {
		if !e.replicas[name].Stop(30 * time.Second) {
			t.Errorf("%s did not stop on SIGTERM within 30 s", name)
		}
	}
	e.createRange(t, 2*third, e.n)
	e.waitConvergedOf(t, e.n, false)

	writes := e.replicaWrites(t)
	checkFenced(t, writes, e.shardOf(t))
	// Across shards too: each side's writes begin after the other's end.
	turns := [][]string{{"unsharded-a"}, sharded, {"unsharded-b"}}
	for i := 1; i < len(turns); i++ {
		before, after := turns[i-1], turns[i]
		var lastAnswered, firstReceived time.Time
		n := 0
		for _, w := range writes {
			switch {
			case slices.Contains(before, w.replica):
				lastAnswered = latest(lastAnswered, w.completed)
			case slices.Contains(after, w.replica):
				if n == 0 {
					firstReceived = w.received
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("%v wrote nothing in its turn", after)
			continue
		}
		if !lastAnswered.Before(firstReceived) {
			t.Errorf("%v wrote from %s, before %v's last write was answered at %s",
				after, firstReceived.Format(time.StampMicro), before, lastAnswered.Format(time.StampMicro))
		}
	}
	// And it said why it waited (after the writes: they are the proof).
	waitLog(t, second.Process, time.Second, "sharded replicas of this controller still hold shards")
}
