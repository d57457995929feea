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
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/metrics"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	"github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/fake"
)

// TestBarInformerFiltersWhatTheServerIgnores proves the fallback: the
// fake clientset, like an API server without ShardedListAndWatch, ignores
// the shard selector the informer sends on its list and watch and returns
// every Bar; the informer's cache then holds exactly the shard's Bars,
// from the list and from the watch, and the Bars it dropped are counted
// and set bar_controller_shard_selector_ignored.
func TestBarInformerFiltersWhatTheServerIgnores(t *testing.T) {
	s := Shard{Index: 1, Count: 2}
	var objs []*barv1.Bar
	for i := range 40 {
		objs = append(objs, &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("before-%02d", i), UID: uuid.NewUUID()}})
	}
	client := fake.NewClientset()
	for _, b := range objs {
		if err := client.Tracker().Add(b); err != nil {
			t.Fatal(err)
		}
	}
	dropped0 := counter(t, "bar_controller_shard_watch_events_total", s.String(), "dropped")

	inf := NewBarInformer(klog.Background(), client, "", 0, s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	// Then as many again through the watch (added to the fake's tracker,
	// which tells its watches), and one last Bar of the shard
	// whose arrival says every create before it has been seen.
	for i := range 40 {
		b := &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("after-%02d", i), UID: uuid.NewUUID()}}
		if err := client.Tracker().Add(b); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, b)
	}
	last := &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "last", UID: uidIn(t, s)}}
	if err := client.Tracker().Add(last); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, last)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := inf.GetStore().GetByKey("ns/last")
		return ok, nil
	}); err != nil {
		t.Fatal("the last Bar never reached the cache")
	}

	var want, outside []string
	for _, b := range objs {
		if s.Holds(b.UID) {
			want = append(want, "ns/"+b.Name)
		} else {
			outside = append(outside, b.Name)
		}
	}
	got := inf.GetStore().ListKeys()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the cache holds %v; want exactly the shard's %v", got, want)
	}
	if d := counter(t, "bar_controller_shard_watch_events_total", s.String(), "dropped") - dropped0; d != float64(len(outside)) {
		t.Errorf("dropped %v Bars by the metric; want %d, those outside the shard", d, len(outside))
	}
	if v := counter(t, "bar_controller_shard_selector_ignored", "", ""); v != 1 {
		t.Errorf("bar_controller_shard_selector_ignored = %v; want 1", v)
	}
	// What it asked for: the shard, on the list and on the watch.
	asked := 0
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			asked++
			if a.ListOptions.ShardSelector != s.BarSelector() {
				t.Errorf("list with shardSelector %q; want %q", a.ListOptions.ShardSelector, s.BarSelector())
			}
		case k8stesting.WatchActionImpl:
			asked++
			if a.ListOptions.ShardSelector != s.BarSelector() {
				t.Errorf("watch with shardSelector %q; want %q", a.ListOptions.ShardSelector, s.BarSelector())
			}
		}
	}
	if asked < 2 {
		t.Errorf("%d list or watch requests; want a list and a watch", asked)
	}
}

// uidIn is a random UID in the shard.
func uidIn(t *testing.T, s Shard) types.UID {
	t.Helper()
	for range 1000 {
		if uid := uuid.NewUUID(); s.Holds(uid) {
			return uid
		}
	}
	t.Fatal("no UID of 1,000 in the shard")
	return ""
}

// counter reads a metric of this process's registry, a series picked by
// its shard and outcome labels where given.
func counter(t *testing.T, name, shard, outcome string) float64 {
	t.Helper()
	families, err := metrics.NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !labelIs(m, "shard", shard) || !labelIs(m, "outcome", outcome) {
				continue
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

func labelIs(m *dto.Metric, name, value string) bool {
	if value == "" {
		return true
	}
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
