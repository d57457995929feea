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

// Package shards splits the Bars between replicas: which Bars shard k of N
// holds, the selectors that make the API server send a replica only its
// shards' Bars and Deployments, and the same test on the client for an API
// server that ignores them.
//
// A Bar belongs to a shard by the 64-bit FNV-1a hash of its UID, the hash
// the API server's shardRange() computes (KEP-5866,
// k8s.io/apimachinery/pkg/sharding). Not by namespace: one namespace may
// hold every Bar, and then one shard would hold them all. A Deployment has a
// UID of its own, so the API server cannot put it in its Bar's shard; the
// controller writes its Bar's bucket on it as a label instead (BucketLabel),
// and a shard watches its Deployments with a label selector over its
// buckets. Shards are therefore whole buckets: bucket b is the hashes whose
// top byte is b, and shard k of N holds buckets [k*256/N, (k+1)*256/N).
package shards

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// Buckets is how many parts the hash space is cut into, and so the
	// most shards there can be. 256: a bucket is one byte, a label value
	// two hex digits, and the largest set a shard's Deployment selector
	// lists (128 values at N=2) stays a short query string.
	Buckets = 256

	// BucketLabel is the label a sharded controller writes on every
	// Deployment it manages: the bucket of the Bar that owns it, as two
	// lowercase hex digits.
	BucketLabel = "barcontroller.dev/shard-bucket"

	// uidField is the field the API server hashes for a Bar.
	uidField = "object.metadata.uid"
)

// Shard is shard Index of Count.
type Shard struct {
	Index, Count int
}

// Validate says whether the shard exists.
func (s Shard) Validate() error {
	if s.Count < 1 || s.Count > Buckets {
		return fmt.Errorf("the number of shards must be between 1 and %d, not %d", Buckets, s.Count)
	}
	if s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("shard %d does not exist among %d", s.Index, s.Count)
	}
	return nil
}

// String names the shard as logs, metrics and Lease names do: "2-of-6".
func (s Shard) String() string { return fmt.Sprintf("%d-of-%d", s.Index, s.Count) }

// buckets are the shard's buckets, [lo, hi).
func (s Shard) buckets() (lo, hi int) {
	return s.Index * Buckets / s.Count, (s.Index + 1) * Buckets / s.Count
}

// Bucket is the bucket of a Bar's UID: the top byte of the hash the API
// server's shardRange() computes for it.
func Bucket(uid types.UID) int {
	// HashField gives 16 hex digits, zero-padded: the first two are the
	// top byte.
	b, err := strconv.ParseUint(sharding.HashField(string(uid))[:2], 16, 8)
	if err != nil {
		panic(err) // HashField always writes hex digits
	}
	return int(b)
}

// BucketValue is the BucketLabel value for a Bar's UID.
func BucketValue(uid types.UID) string { return fmt.Sprintf("%02x", Bucket(uid)) }

// Holds says whether the shard holds the Bar with this UID.
func (s Shard) Holds(uid types.UID) bool {
	lo, hi := s.buckets()
	b := Bucket(uid)
	return lo <= b && b < hi
}

// requirement is the shard's range over the hash space.
func (s Shard) requirement() sharding.ShardRangeRequirement {
	lo, hi := s.buckets()
	return sharding.ShardRangeRequirement{Key: uidField, Start: bound(lo), End: bound(hi)}
}

// bound is where bucket b begins, as shardRange() writes it: 0x and 16
// hex digits, or 2^64 (17) past the last bucket.
func bound(b int) string {
	if b == Buckets {
		return "0x10000000000000000"
	}
	return fmt.Sprintf("0x%02x00000000000000", b)
}

// BarSelector is the shardSelector of a list or watch of Bars that the API
// server answers with this shard's Bars only (when its ShardedListAndWatch
// gate is on).
func (s Shard) BarSelector() string {
	return sharding.NewSelector(s.requirement()).String()
}

// Matches is the client's own test of BarSelector, the API server's code:
// for a server that ignored the selector and sent every Bar.
func (s Shard) Matches(obj runtime.Object) (bool, error) {
	return sharding.NewSelector(s.requirement()).Matches(obj)
}

// DeploymentRequirement is the label requirement that selects the
// Deployments this shard's Bars may own: "BucketLabel notin (...)", every
// other shard's bucket listed. It selects the shard's own buckets, and
// Deployments with no bucket at all: a Bar's from before --shards, which
// its first sync labels, must be seen in full by the shard that holds
// the Bar, whichever that is.
func (s Shard) DeploymentRequirement() string {
	lo, hi := s.buckets()
	values := make([]string, 0, Buckets-(hi-lo))
	for b := range Buckets {
		if b < lo || b >= hi {
			values = append(values, fmt.Sprintf("%02x", b))
		}
	}
	return BucketLabel + " notin (" + strings.Join(values, ",") + ")"
}

// All lists the shards of count.
func All(count int) []Shard {
	all := make([]Shard, count)
	for i := range all {
		all[i] = Shard{Index: i, Count: count}
	}
	return all
}
