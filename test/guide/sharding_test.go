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

package guide

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The proofs of docs/informer-sharding.md: what the API server does with
// a list's and a watch's shardSelector (KEP-5866), with its
// ShardedListAndWatch gate on (shardedServer) and off (realServer).

// lowerHalf is the shard of the objects whose UID hashes below 2^63, in
// the wire form the API server parses and echoes back.
const lowerHalf = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"

// inLowerHalf is the same test on the client, with apimachinery's hash.
func inLowerHalf(uid types.UID) bool {
	return sharding.HexLess("0x"+sharding.HashField(string(uid)), "0x8000000000000000")
}

// createConfigMaps creates n ConfigMaps named prefix-i and returns the
// names of those in the lower half.
func createConfigMaps(t *testing.T, kube kubernetes.Interface, ns, prefix string, n int) (lower []string) {
	t.Helper()
	for i := range n {
		cm, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), configMapIn(ns, fmt.Sprintf("%s-%02d", prefix, i)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if inLowerHalf(cm.UID) {
			lower = append(lower, cm.Name)
		}
	}
	slices.Sort(lower)
	return lower
}

// watchNames reads ADDED events until the initial-events-end bookmark
// (initial) or until the MODIFIED event of stop (after): the names added.
func watchNames(t *testing.T, w watch.Interface, stop string) []string {
	t.Helper()
	var names []string
	timeout := time.After(time.Minute)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %v", names)
			}
			cm, isCM := e.Object.(*corev1.ConfigMap)
			switch {
			case e.Type == watch.Bookmark && stop == "" && isCM && cm.Annotations[metav1.InitialEventsAnnotationKey] == "true":
				slices.Sort(names)
				return names
			case e.Type == watch.Added && isCM:
				names = append(names, cm.Name)
			case e.Type == watch.Modified && isCM && cm.Name == stop:
				slices.Sort(names)
				return names
			case e.Type == watch.Error:
				t.Fatalf("watch error: %v", e.Object)
			}
		case <-timeout:
			t.Fatalf("no end of the events after %v", names)
		}
	}
}

// apiServerCounter sums a counter or gauge of the API server's /metrics
// over the series of one resource.
func apiServerCounter(t *testing.T, kube kubernetes.Interface, name, resource string) float64 {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, `resource="`+resource+`"`) {
			v, _ := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndex(line, " ")+1:]), 64)
			total += v
		}
	}
	return total
}

// TestShardSelectorFiltersListAndWatch proves, against kube-apiserver
// 1.37 with ShardedListAndWatch on: a LIST with a shardSelector returns
// exactly the objects whose hashed UID is in the range, the hash
// apimachinery's sharding package computes on the client, and says so in
// metadata.shardInfo; a WatchList with it streams exactly those as its
// initial events; the watch then sends only the matching objects'
// events, counting each one it holds back in
// apiserver_watch_filtered_events_total; and the watch is
// counted in apiserver_watch_shards_total while it is open.
func TestShardSelectorFiltersListAndWatch(t *testing.T) {
	cfg, ns := shardedServer.get(t)
	kube := typedClient(t, cfg)
	lower := createConfigMaps(t, kube, ns, "before", 24)

	l, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{ShardSelector: lowerHalf})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, cm := range l.Items {
		listed = append(listed, cm.Name)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, lower) {
		t.Errorf("LIST with a shardSelector: %v; want exactly the lower half by the client's hash, %v", listed, lower)
	}
	if l.ShardInfo == nil || l.ShardInfo.Selector != lowerHalf {
		t.Errorf("LIST with a shardSelector: shardInfo %+v; want the selector echoed, %q", l.ShardInfo, lowerHalf)
	}

	shardsBefore := apiServerCounter(t, kube, "apiserver_watch_shards_total", "configmaps")
	filteredBefore := apiServerCounter(t, kube, "apiserver_watch_filtered_events_total", "configmaps")
	w, err := kube.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{ShardSelector: lowerHalf,
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if initial := watchNames(t, w, ""); !slices.Equal(initial, lower) {
		t.Errorf("WatchList with a shardSelector: initial events %v; want exactly %v", initial, lower)
	}
	// The initial events pass the same filter as the later ones.
	filteredInitial := apiServerCounter(t, kube, "apiserver_watch_filtered_events_total", "configmaps")
	if got, want := filteredInitial-filteredBefore, float64(24-len(lower)); got != want {
		t.Errorf("apiserver_watch_filtered_events_total went up by %v over the initial events; want %v, one per object outside the shard", got, want)
	}
	if open := apiServerCounter(t, kube, "apiserver_watch_shards_total", "configmaps"); open != shardsBefore+1 {
		t.Errorf("apiserver_watch_shards_total %v with the watch open, %v before; want one more", open, shardsBefore)
	}

	// Then 24 more, and last an update of an object in the shard: the
	// watch delivers in resourceVersion order, so by that update's event
	// every create before it has been sent or held back.
	later := createConfigMaps(t, kube, ns, "after", 24)
	if len(lower) == 0 {
		t.Fatal("no ConfigMap of 24 hashed into the lower half")
	}
	last := configMapIn(ns, lower[0])
	last.Labels = map[string]string{"touched": "yes"}
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(t.Context(), last, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if added := watchNames(t, w, lower[0]); !slices.Equal(added, later) {
		t.Errorf("watch with a shardSelector: added %v; want exactly the new ones in the shard, %v", added, later)
	}
	filtered := apiServerCounter(t, kube, "apiserver_watch_filtered_events_total", "configmaps") - filteredInitial
	if want := float64(24 - len(later)); filtered != want {
		t.Errorf("apiserver_watch_filtered_events_total went up by %v; want %v, one per create outside the shard", filtered, want)
	}
}

// TestShardSelectorIgnoredWithoutTheGate proves, against kube-apiserver
// 1.37 with its default gates (ShardedListAndWatch off): a LIST with a
// shardSelector returns every object and no shardInfo, and a WatchList
// with it streams every object: the request is not refused, so nothing
// but the objects themselves tells the client its selector was ignored.
func TestShardSelectorIgnoredWithoutTheGate(t *testing.T) {
	cfg, ns := realServer(t)
	kube := typedClient(t, cfg)
	lower := createConfigMaps(t, kube, ns, "cm", 24)
	if len(lower) == 0 || len(lower) == 24 {
		t.Fatalf("%d of 24 in the lower half: the proof needs objects on both sides", len(lower))
	}
	l, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{ShardSelector: lowerHalf})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 24 || l.ShardInfo != nil {
		t.Errorf("gate off, LIST with a shardSelector: %d items, shardInfo %+v; want all 24 and none", len(l.Items), l.ShardInfo)
	}
	w, err := kube.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{ShardSelector: lowerHalf,
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if initial := watchNames(t, w, ""); len(initial) != 24 {
		t.Errorf("gate off, WatchList with a shardSelector: %d initial events; want all 24", len(initial))
	}
}

// TestReflectorAsksWithTheShardSelector proves: an informer whose
// ListOptions carry a shardSelector (a factory's TweakListOptions, as
// internal/shards/informer.go sets it) sends it on its one WatchList
// request, and its store then holds exactly the shard's objects.
func TestReflectorAsksWithTheShardSelector(t *testing.T) {
	cfg, ns := shardedServer.get(t)
	lower := createConfigMaps(t, typedClient(t, cfg), ns, "cm", 24)
	log := &requestLog{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
	f := informers.NewSharedInformerFactoryWithOptions(typedClient(t, cfg), 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.ShardSelector = lowerHalf }))
	inf := f.Core().V1().ConfigMaps().Informer()
	runInformer(t, inf)

	log.mu.Lock()
	urls := append([]string(nil), log.urls...)
	log.mu.Unlock()
	if len(urls) != 1 || !strings.Contains(urls[0], "sendInitialEvents=true") || !strings.Contains(urls[0], "shardSelector=shardRange") {
		t.Errorf("requests %v; want one WatchList carrying the shardSelector", urls)
	}
	var held []string
	for _, key := range inf.GetStore().ListKeys() {
		held = append(held, key[strings.Index(key, "/")+1:])
	}
	slices.Sort(held)
	if !slices.Equal(held, lower) {
		t.Errorf("the informer holds %v; want exactly the shard, %v", held, lower)
	}
}
