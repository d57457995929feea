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
	"hash/fnv"
	"slices"
	"strconv"
)

// View is what a replica knows of the others, from the Leases: the live
// members (replicas whose member Lease is renewed, this one included) and
// the live holder of each shard's Lease ("" when free or expired).
type View struct {
	Self    string
	Members []string
	Holders []string // by shard index; len is the number of shards
	// OtherCountHeld is set while a live Lease of a shard of another
	// number of shards exists: replicas configured with another --shards
	// (a rollout that changes it) still write, by ranges that overlap
	// this replica's. It takes nothing until they are gone.
	OtherCountHeld bool
}

// Plan is what a replica does next to reach its fair share.
type Plan struct {
	// Target is this replica's fair share: the members sorted by name, the
	// first Count%R of them hold Count/R+1 shards, the others Count/R.
	Target int
	// Release are shards this replica holds beyond Target: it stops their
	// work and gives their Leases up, so that a member below its share can
	// take them. Only the surplus moves: a replica that joins or leaves
	// moves about Count/R shards, not all of them.
	Release []int
	// Take are free shards to contend for, as many as this replica is short.
	// Each replica ranks the shards its own way (rendezvous hashing on its
	// name), so that replicas short at the same time mostly go for
	// different shards instead of all for the lowest.
	Take []int
}

// NewPlan decides from a View. It is a pure function of it: every replica
// that sees the same Leases reaches the same targets, and the targets add
// up to the number of shards.
func NewPlan(v View) Plan {
	members := slices.Clone(v.Members)
	if !slices.Contains(members, v.Self) {
		members = append(members, v.Self)
	}
	slices.Sort(members)
	members = slices.Compact(members)
	n, r := len(v.Holders), len(members)
	i := slices.Index(members, v.Self)
	p := Plan{Target: n / r}
	if i < n%r {
		p.Target++
	}

	var held, free []int
	for k, h := range v.Holders {
		switch h {
		case v.Self:
			held = append(held, k)
		case "":
			free = append(free, k)
		}
	}
	// Most preferred first.
	byPreference := func(s []int) {
		slices.SortFunc(s, func(a, b int) int {
			pa, pb := preference(v.Self, a), preference(v.Self, b)
			switch {
			case pa > pb:
				return -1
			case pa < pb:
				return 1
			}
			return a - b
		})
	}
	if len(held) > p.Target {
		// Keep the shards this replica prefers; give up the rest.
		byPreference(held)
		p.Release = held[p.Target:]
		slices.Sort(p.Release)
	}
	if short := p.Target - len(held); short > 0 && !v.OtherCountHeld {
		byPreference(free)
		p.Take = free[:min(short, len(free))]
	}
	return p
}

// preference is replica's rendezvous score for a shard.
func preference(replica string, shard int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(replica))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(shard)))
	return h.Sum64()
}
