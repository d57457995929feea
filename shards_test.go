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

package main

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/barcontroller/bar-controller/internal/shards"
)

// A sharded controller's Deployment carries its Bar's bucket; the
// cache's trimmed copy keeps it, so a sync that finds the Deployment as
// wanted sees no difference (and takes the path that reads no
// managedFields). Unsharded, there is no such label.
func TestShardedDeploymentCarriesItsBucket(t *testing.T) {
	bar := newBar("web", "web", 2)
	shard := shards.Shard{Index: 1, Count: 3}
	sharded := &Controller{shard: &shard}
	want := sharded.wantDeployment(bar)
	if got := want.Labels[shards.BucketLabel]; got != shards.BucketValue(bar.UID) {
		t.Fatalf("bucket label %q, want %q", got, shards.BucketValue(bar.UID))
	}
	d, err := deploymentObject(withDesiredHash(want))
	if err != nil {
		t.Fatal(err)
	}
	trimmed, err := trimDeployment(d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := deploymentDiff(want, trimmed.(*appsv1.Deployment)); len(diff) != 0 {
		t.Errorf("the cached copy of the Deployment as wanted differs in %v", diff)
	}
	if _, ok := (&Controller{}).wantDeployment(bar).Labels[shards.BucketLabel]; ok {
		t.Error("an unsharded controller's Deployment has a bucket label")
	}
}

// A shard's two Deployment caches: the whole one holds the managed
// Deployments of its buckets and ours from before sharding (no bucket);
// the metadata one every unmanaged Deployment, even one that carries a
// bucket label. A managed Deployment of another shard's bucket is in
// neither (the sync reads it when a create finds it: sync.go).
func TestShardSelectorsSplitDeployments(t *testing.T) {
	shard := shards.Shard{Index: 0, Count: 2} // buckets 00-7f
	managedSel, othersSel := deploymentSelectors(&shard)
	m, o := mustSelector(managedSel), mustSelector(othersSel)
	for _, tc := range []struct {
		name                string
		labels              labels.Set
		inManaged, inOthers bool
	}{
		{"ours, this shard's bucket", labels.Set{managedByLabel: managedByValue, barLabel: "web", shards.BucketLabel: "3f"}, true, false},
		{"ours, another shard's bucket", labels.Set{managedByLabel: managedByValue, barLabel: "web", shards.BucketLabel: "c0"}, false, false},
		{"ours, from before sharding", labels.Set{managedByLabel: managedByValue, barLabel: "web"}, true, false},
		{"someone else's", labels.Set{"app": "web"}, false, true},
		{"someone else's, with a bucket label", labels.Set{"app": "web", shards.BucketLabel: "3f"}, false, true},
		{"no labels", nil, false, true},
	} {
		if got := m.Matches(tc.labels); got != tc.inManaged {
			t.Errorf("%s: in the whole cache %v, want %v", tc.name, got, tc.inManaged)
		}
		if got := o.Matches(tc.labels); got != tc.inOthers {
			t.Errorf("%s: in the metadata cache %v, want %v", tc.name, got, tc.inOthers)
		}
	}
	if a, b := deploymentSelectors(nil); a != managedSelector || b != othersSelector {
		t.Errorf("unsharded selectors %q, %q", a, b)
	}
}
