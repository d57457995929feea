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
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNewPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		view View
		// Take is checked by count only: which free shards a replica
		// prefers is its rendezvous ranking.
		target, release, take int
		releaseOf             []int // if set, exactly these
	}{{
		name:   "alone, nothing held: take every shard",
		view:   View{Self: "a", Holders: make([]string, 6)},
		target: 6, take: 6,
	}, {
		name:   "three members, six shards, nothing held: two each",
		view:   View{Self: "b", Members: []string{"a", "b", "c"}, Holders: make([]string, 6)},
		target: 2, take: 2,
	}, {
		name:   "seven shards over three: the first member by name gets the odd one",
		view:   View{Self: "a", Members: []string{"c", "b", "a"}, Holders: make([]string, 7)},
		target: 3, take: 3,
	}, {
		name:   "seven shards over three, the last member",
		view:   View{Self: "c", Members: []string{"a", "b", "c"}, Holders: make([]string, 7)},
		target: 2, take: 2,
	}, {
		name:   "self missing from the members it sees (its own Lease not yet seen): counted",
		view:   View{Self: "b", Members: []string{"a"}, Holders: make([]string, 4)},
		target: 2, take: 2,
	}, {
		name:   "at its share: nothing to do",
		view:   View{Self: "a", Members: []string{"a", "b", "c"}, Holders: []string{"a", "b", "c", "a", "b", "c"}},
		target: 2,
	}, {
		name:   "a fourth member joined: the members past the remainder give one up",
		view:   View{Self: "c", Members: []string{"a", "b", "c", "d"}, Holders: []string{"a", "b", "c", "a", "b", "c"}},
		target: 1, release: 1,
	}, {
		name:   "a fourth member joined: the first members keep two",
		view:   View{Self: "a", Members: []string{"a", "b", "c", "d"}, Holders: []string{"a", "b", "c", "a", "b", "c"}},
		target: 2,
	}, {
		name:   "the one that joined waits for free shards",
		view:   View{Self: "d", Members: []string{"a", "b", "c", "d"}, Holders: []string{"a", "b", "c", "a", "b", "c"}},
		target: 1,
	}, {
		name:   "a member left: its shards are free, the rest take them",
		view:   View{Self: "a", Members: []string{"a", "b"}, Holders: []string{"a", "b", "", "a", "b", ""}},
		target: 3, take: 1,
	}, {
		name:   "short, but fewer shards free than short: takes what is free",
		view:   View{Self: "a", Members: []string{"a"}, Holders: []string{"x", "x", "", "x"}},
		target: 4, take: 1,
	}, {
		name:      "sole member holding everything of a larger share: keeps all",
		view:      View{Self: "a", Holders: []string{"a", "a", "a"}},
		target:    3,
		releaseOf: nil,
	}, {
		name:   "replicas of another --shards still hold Leases: take nothing",
		view:   View{Self: "a", Members: []string{"a"}, Holders: make([]string, 3), OtherCountHeld: true},
		target: 3,
	}, {
		name:   "more members than shards: some hold none",
		view:   View{Self: "c", Members: []string{"a", "b", "c"}, Holders: []string{"a", "b"}},
		target: 0,
	}, {
		name:      "more members than shards, holding one it should not",
		view:      View{Self: "c", Members: []string{"a", "b", "c"}, Holders: []string{"a", "c"}},
		target:    0,
		release:   1,
		releaseOf: []int{1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPlan(tc.view)
			if p.Target != tc.target || len(p.Release) != tc.release || len(p.Take) != tc.take {
				t.Errorf("plan %+v: want target %d, %d to release, %d to take", p, tc.target, tc.release, tc.take)
			}
			if tc.releaseOf != nil && !slices.Equal(p.Release, tc.releaseOf) {
				t.Errorf("releases %v, want %v", p.Release, tc.releaseOf)
			}
			for _, k := range p.Take {
				if tc.view.Holders[k] != "" {
					t.Errorf("takes shard %d, held by %s", k, tc.view.Holders[k])
				}
			}
			for _, k := range p.Release {
				if tc.view.Holders[k] != tc.view.Self {
					t.Errorf("releases shard %d, held by %q", k, tc.view.Holders[k])
				}
			}
		})
	}
}

// Replicas that act on their plans in turn, each seeing what the others
// did (a free shard goes to whoever asks first), reach their fair shares
// from any start, and a member joining or leaving moves only about
// shards/members of them.
func TestPlansConverge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + rng.IntN(12)
		r := 1 + rng.IntN(5)
		members := make([]string, r)
		for i := range members {
			members[i] = fmt.Sprintf("replica-%d-%d", trial, rng.IntN(1000000))
		}
		holders := make([]string, n)
		for k := range holders { // any start: random holders, some free
			if i := rng.IntN(r + 1); i < r {
				holders[k] = members[i]
			}
		}
		rounds := settle(t, rng, members, holders)
		checkFair(t, members, holders)
		if rounds > 4 {
			t.Errorf("N=%d R=%d: %d rounds to settle", n, r, rounds)
		}

		// One joins: the moves are the new member's share, no more.
		before := slices.Clone(holders)
		joined := append(slices.Clone(members), fmt.Sprintf("replica-%d-new", trial))
		settle(t, rng, joined, holders)
		checkFair(t, joined, holders)
		if moved, bound := changed(before, holders), n/len(joined)+1; moved > bound {
			t.Errorf("N=%d R=%d→%d: %d shards moved, at most %d should", n, r, len(joined), moved, bound)
		}

		// One leaves (its Leases expire): only its shards move.
		gone := joined[rng.IntN(len(joined))]
		before = slices.Clone(holders)
		for k, h := range holders {
			if h == gone {
				holders[k] = ""
			}
		}
		left := slices.DeleteFunc(slices.Clone(joined), func(m string) bool { return m == gone })
		settle(t, rng, left, holders)
		checkFair(t, left, holders)
		for k := range holders {
			if before[k] != gone && before[k] != holders[k] {
				t.Errorf("N=%d: shard %d moved from %s, which stayed, to %s", n, k, before[k], holders[k])
			}
		}
	}
}

// settle lets the members act on their plans in random order until none
// has anything to do; it returns the rounds it took.
func settle(t *testing.T, rng *rand.Rand, members, holders []string) int {
	t.Helper()
	for round := 1; round <= 20; round++ {
		acted := false
		for _, i := range rng.Perm(len(members)) {
			p := NewPlan(View{Self: members[i], Members: members, Holders: holders})
			for _, k := range p.Release {
				holders[k] = ""
				acted = true
			}
			for _, k := range p.Take {
				if holders[k] == "" {
					holders[k] = members[i]
					acted = true
				}
			}
		}
		if !acted {
			return round
		}
	}
	t.Fatalf("members %v never settled: %v", members, holders)
	return 0
}

func checkFair(t *testing.T, members, holders []string) {
	t.Helper()
	count := map[string]int{}
	for k, h := range holders {
		if h == "" {
			t.Errorf("shard %d held by nobody: %v", k, holders)
		}
		count[h]++
	}
	lo, hi := len(holders)/len(members), (len(holders)+len(members)-1)/len(members)
	for _, m := range members {
		if c := count[m]; c < lo || c > hi {
			t.Errorf("%s holds %d of %d shards among %d members", m, c, len(holders), len(members))
		}
	}
}

func changed(a, b []string) int {
	n := 0
	for k := range a {
		if a[k] != b[k] {
			n++
		}
	}
	return n
}
