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
	"math"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	apiserversharding "k8s.io/apiserver/pkg/sharding"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		shard Shard
		ok    bool
	}{
		{Shard{0, 1}, true},
		{Shard{5, 6}, true},
		{Shard{255, 256}, true},
		{Shard{0, 0}, false},
		{Shard{6, 6}, false},
		{Shard{-1, 6}, false},
		{Shard{0, 257}, false},
	} {
		if err := tc.shard.Validate(); (err == nil) != tc.ok {
			t.Errorf("%v.Validate() = %v, want ok %v", tc.shard, err, tc.ok)
		}
	}
}

// The API server's own examples (ListOptions.ShardSelector's comment in
// k8s.io/apimachinery/pkg/apis/meta/v1/types.go) and ours must be the same
// strings: a 2-way and a 4-way split fall on bucket bounds.
func TestBarSelector(t *testing.T) {
	for _, tc := range []struct {
		shard Shard
		want  string
	}{
		{Shard{0, 1}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"},
		{Shard{0, 2}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"},
		{Shard{1, 2}, "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"},
		{Shard{2, 4}, "shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')"},
		// 256/6 is not whole: shards hold 42 or 43 buckets.
		{Shard{0, 6}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x2a00000000000000')"},
		{Shard{1, 6}, "shardRange(object.metadata.uid, '0x2a00000000000000', '0x5500000000000000')"},
		{Shard{5, 6}, "shardRange(object.metadata.uid, '0xd500000000000000', '0x10000000000000000')"},
	} {
		got := tc.shard.BarSelector()
		if got != tc.want {
			t.Errorf("%v.BarSelector() = %s, want %s", tc.shard, got, tc.want)
		}
		// What the API server parses is what we meant.
		sel, err := apiserversharding.Parse(got)
		if err != nil {
			t.Fatalf("the API server's parser refuses %s: %v", got, err)
		}
		if reqs := sel.Requirements(); len(reqs) != 1 || reqs[0] != tc.shard.requirement() {
			t.Errorf("the API server parses %s as %+v", got, reqs)
		}
	}
}

// Every bucket is in exactly one shard, for every number of shards, and
// shards differ in size by at most one bucket.
func TestShardsPartitionTheBuckets(t *testing.T) {
	for n := 1; n <= Buckets; n++ {
		owner := make([]int, Buckets)
		for i := range owner {
			owner[i] = -1
		}
		smallest, largest := Buckets, 0
		for _, s := range All(n) {
			lo, hi := s.buckets()
			smallest, largest = min(smallest, hi-lo), max(largest, hi-lo)
			for b := lo; b < hi; b++ {
				if owner[b] != -1 {
					t.Fatalf("N=%d: bucket %d in shards %d and %d", n, b, owner[b], s.Index)
				}
				owner[b] = s.Index
			}
		}
		for b, o := range owner {
			if o == -1 {
				t.Fatalf("N=%d: bucket %d in no shard", n, b)
			}
		}
		if largest-smallest > 1 {
			t.Errorf("N=%d: shards of %d to %d buckets", n, smallest, largest)
		}
	}
}

// The three ways of saying which shard a Bar is in agree: the API
// server's selector (Matches, its code), the bucket arithmetic (Holds) and
// the Deployment label selector over BucketValue.
func TestShardWaysAgree(t *testing.T) {
	const bars = 6000
	for _, n := range []int{1, 2, 3, 6, 7, 64, 256} {
		count := make([]int, n)
		selectors := make([]labels.Selector, n)
		for k, s := range All(n) {
			var err error
			if selectors[k], err = labels.Parse(s.DeploymentRequirement()); err != nil {
				t.Fatal(err)
			}
		}
		for range bars {
			uid := uuid.NewUUID()
			bar := &barv1.Bar{ObjectMeta: metav1.ObjectMeta{UID: uid}}
			// Which shard the buckets say (TestShardsPartitionTheBuckets:
			// exactly one); it and its neighbours are asked the two other
			// ways, the API server's and the label selector's.
			home, b := -1, Bucket(uid)
			for _, s := range All(n) {
				if lo, hi := s.buckets(); lo <= b && b < hi {
					home = s.Index
				}
			}
			if !(Shard{home, n}).Holds(uid) {
				t.Fatalf("Holds disagrees with the buckets for %s", uid)
			}
			for _, k := range []int{home, (home + 1) % n, (home + n - 1) % n} {
				s, want := Shard{k, n}, k == home
				matches, err := s.Matches(bar)
				if err != nil {
					t.Fatal(err)
				}
				if matches != want {
					t.Fatalf("shard %v: the API server's test says %v for %s, the buckets %v", s, matches, uid, want)
				}
				if got := selectors[k].Matches(labels.Set{BucketLabel: BucketValue(uid)}); got != want {
					t.Fatalf("shard %v: the Deployment selector says %v for %s, the buckets %v", s, got, uid, want)
				}
			}
			count[home]++
		}
		// Random UIDs spread as the buckets do: each shard's count within
		// 5 standard deviations of a binomial with its share of the
		// buckets (a false alarm about once in 1.7 million shards).
		for k, c := range count {
			lo, hi := Shard{k, n}.buckets()
			p := float64(hi-lo) / Buckets
			slack := 5 * math.Sqrt(bars*p*(1-p))
			if d := float64(c) - bars*p; math.Abs(d) > slack {
				t.Errorf("N=%d: shard %d holds %d of %d Bars, %.0f expected", n, k, c, bars, bars*p)
			}
		}
	}
}

func TestBucketValue(t *testing.T) {
	// FNV-1a 64 of "" is 0xcbf29ce484222325: bucket 0xcb.
	if got := BucketValue(types.UID("")); got != "cb" {
		t.Errorf("BucketValue(\"\") = %s, want cb", got)
	}
	for range 1000 {
		v := BucketValue(uuid.NewUUID())
		if len(v) != 2 || strings.ToLower(v) != v {
			t.Fatalf("BucketValue = %q, want two lowercase hex digits", v)
		}
	}
}

func TestDeploymentRequirement(t *testing.T) {
	// Shard 1 of 128 is buckets 02 and 03: the requirement lists the
	// other 254, so that it selects those two and Deployments with none.
	sel, err := labels.Parse(Shard{1, 128}.DeploymentRequirement())
	if err != nil {
		t.Fatalf("does not parse: %v", err)
	}
	for value, want := range map[string]bool{"01": false, "02": true, "03": true, "04": false, "ff": false} {
		if got := sel.Matches(labels.Set{BucketLabel: value}); got != want {
			t.Errorf("bucket %s selected %v, want %v", value, got, want)
		}
	}
	if !sel.Matches(labels.Set{}) {
		t.Errorf("a Deployment with no bucket is not selected")
	}
	if _, err := labels.Parse(Shard{0, 256}.DeploymentRequirement()); err != nil {
		t.Errorf("the largest set (N=256, 255 buckets listed) does not parse: %v", err)
	}
	if got := fmt.Sprint(Shard{2, 6}); got != "2-of-6" {
		t.Errorf("String() = %s", got)
	}
}
