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
	"cmp"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// requestLog records the URLs of the requests a client sends.
type requestLog struct {
	mu   sync.Mutex
	urls []string
	next http.RoundTripper
}

func (l *requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.urls = append(l.urls, r.Method+" "+r.URL.RequestURI())
	l.mu.Unlock()
	return l.next.RoundTrip(r)
}

// countingTransform counts the transform's calls per object name.
type countingTransform struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingTransform) transform(obj interface{}) (interface{}, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		c.mu.Lock()
		c.calls[cm.Name]++
		c.mu.Unlock()
	}
	return obj, nil
}

// TestWatchListStreamsTheInitialStateAndTransformsTwice proves, against a
// real kube-apiserver: the informer's initial state comes from one watch
// request with `sendInitialEvents=true`, no LIST ("At `-v=6` the
// controller logs exactly one request per informer"); and under WatchList
// the transform runs twice per object ("`watchList`'s temporary store has
// already applied the transform once before `Replace` applies it
// again"), while an informer on a fake clientset, which lists, runs it
// once.
func TestWatchListStreamsTheInitialStateAndTransformsTwice(t *testing.T) {
	cfg, ns := realServer(t)
	kube := typedClient(t, cfg)
	for _, n := range []string{"a", "b"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), configMapIn(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	log := &requestLog{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
	ct := &countingTransform{calls: map[string]int{}}
	f := informers.NewSharedInformerFactoryWithOptions(typedClient(t, cfg), 0, informers.WithNamespace(ns),
		informers.WithTransform(ct.transform))
	runInformer(t, f.Core().V1().ConfigMaps().Informer())

	log.mu.Lock()
	urls := append([]string(nil), log.urls...)
	log.mu.Unlock()
	if len(urls) != 1 || !strings.Contains(urls[0], "sendInitialEvents=true") || !strings.Contains(urls[0], "watch=true") {
		t.Errorf("requests %v, want one watch with sendInitialEvents=true", urls)
	}
	ct.mu.Lock()
	if ct.calls["a"] != 2 || ct.calls["b"] != 2 {
		t.Errorf("WatchList: transform calls %v, want 2 per object", ct.calls)
	}
	ct.mu.Unlock()

	fakeCT := &countingTransform{calls: map[string]int{}}
	ff := informers.NewSharedInformerFactoryWithOptions(fake.NewClientset(configMapIn(ns, "a")), 0, informers.WithTransform(fakeCT.transform))
	runInformer(t, ff.Core().V1().ConfigMaps().Informer())
	fakeCT.mu.Lock()
	defer fakeCT.mu.Unlock()
	if fakeCT.calls["a"] != 1 {
		t.Errorf("LIST (fake clientset): transform calls %v, want 1", fakeCT.calls)
	}
}

func configMapIn(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// TestListFromResourceVersionZeroIsNotPaginated proves: a `LIST` "from
// resourceVersion `"0"`" is answered from the watch cache whole, whatever
// its limit (the reflector keeps its page size for it: the comment in
// `(*Reflector).list`); a LIST with resourceVersion "" and a limit gets
// a page and a continue token.
func TestListFromResourceVersionZeroIsNotPaginated(t *testing.T) {
	cfg, ns := realServer(t)
	kube := typedClient(t, cfg)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), configMapIn(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// "0" asks for any resourceVersion, so the watch cache answers with
	// what it has, and it may not have caught up with the creates yet
	// (CI saw 2 of 3 once). Wait, without a limit, until it holds all
	// three: a LIST without a limit is never passed on to etcd (a cache
	// not yet ready answers 429, retried here), while one with a limit is
	// while the cache initialises, and etcd would page it.
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		all, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && len(all.Items) >= 3, nil
	})
	if err != nil {
		t.Fatalf("the watch cache never held the three ConfigMaps: %v", err)
	}
	l, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) < 3 || l.Continue != "" {
		t.Errorf("RV 0, limit 1: %d items, continue %q; want all (at least 3), no continue", len(l.Items), l.Continue)
	}
	l, err = kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Continue == "" {
		t.Errorf("RV \"\", limit 1: %d items, continue %q; want 1 and a continue token", len(l.Items), l.Continue)
	}
}

// TestConsistentListIsServedFromTheWatchCache proves: a LIST with
// resourceVersion "" against a 1.37 API server is a consistent read
// served by the watch cache, not by etcd: it sees a write made just
// before, and the server counts it in
// `apiserver_watch_cache_consistent_read_total{success="true",fallback="false"}`.
func TestConsistentListIsServedFromTheWatchCache(t *testing.T) {
	cfg, ns := realServer(t)
	kube := typedClient(t, cfg)
	served := func() float64 {
		raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "apiserver_watch_cache_consistent_read_total{") && strings.Contains(line, `resource="configmaps"`) &&
				strings.Contains(line, `success="true"`) && strings.Contains(line, `fallback="false"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
				total += v
			}
		}
		return total
	}
	for i := range 2 {
		before := served()
		name := "w" + strconv.Itoa(i)
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), configMapIn(ns, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		l, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, cm := range l.Items {
			found = found || cm.Name == name
		}
		if !found {
			t.Fatalf("a consistent list right after creating %s does not hold it", name)
		}
		if after := served(); after != before+1 {
			t.Fatalf("consistent reads served from the watch cache went %v -> %v, want one more", before, after)
		}
	}
}

// TestListResourceVersionMatch proves, against a real kube-apiserver,
// what a LIST's resourceVersion means beyond "" and "0":
// resourceVersionMatch=Exact answers the state at that version (here
// one ConfigMap of three), at that version; NotOlderThan any state at
// least that new; a resourceVersion with a limit and no match is Exact
// (the legacy rule), the same without a limit NotOlderThan; a match
// without a resourceVersion, and Exact with "0", are refused.
func TestListResourceVersionMatch(t *testing.T) {
	cfg, ns := realServer(t)
	kube := typedClient(t, cfg)
	var rvs []string
	for _, n := range []string{"a", "b", "c"} {
		cm, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), configMapIn(ns, n), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, cm.ResourceVersion)
	}
	list := func(o metav1.ListOptions) (string, string, error) {
		l, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), o)
		if err != nil {
			return "", "", err
		}
		var names []string
		for _, cm := range l.Items {
			names = append(names, cm.Name)
		}
		return strings.Join(names, ","), l.ResourceVersion, nil
	}
	// A consistent list first: the watch cache has then read all three.
	if names, _, err := list(metav1.ListOptions{}); err != nil || names != "a,b,c" {
		t.Fatalf("consistent list: %q, %v", names, err)
	}
	for _, c := range []struct {
		what      string
		opts      metav1.ListOptions
		names, rv string // rv "" is any
	}{
		{"Exact", metav1.ListOptions{ResourceVersion: rvs[0], ResourceVersionMatch: metav1.ResourceVersionMatchExact}, "a", rvs[0]},
		{"NotOlderThan", metav1.ListOptions{ResourceVersion: rvs[0], ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, "a,b,c", ""},
		{"a limit, no match", metav1.ListOptions{ResourceVersion: rvs[0], Limit: 10}, "a", rvs[0]},
		{"no limit, no match", metav1.ListOptions{ResourceVersion: rvs[0]}, "a,b,c", ""},
	} {
		names, rv, err := list(c.opts)
		if err != nil || names != c.names || (c.rv != "" && rv != c.rv) {
			t.Errorf("%s from %s: %q at %s (%v); want %q at %s", c.what, rvs[0], names, rv, err, c.names, cmp.Or(c.rv, "any"))
		}
	}
	for _, o := range []metav1.ListOptions{
		{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
		{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
	} {
		if _, _, err := list(o); !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
			t.Errorf("resourceVersion %q, match %s: %v, want it refused", o.ResourceVersion, o.ResourceVersionMatch, err)
		}
	}
}
