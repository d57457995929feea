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
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// pagingServer answers a reflector's lists as a server would that pages
// (or not) and whose window has moved (or not), and records each list's
// options as "rv=R limit=L continue=C".
type pagingServer struct {
	mu       sync.Mutex
	lists    []string
	watchers []*watch.RaceFreeFakeWatcher
	// pageFirst: answer the next list with a limit in two pages.
	pageFirst bool
	// expireNext: answer the next list from a resourceVersion 410 Gone.
	expireNext bool
	// pageSize: the reflector's WatchListPageSize.
	pageSize int64
}

func (s *pagingServer) lw() cache.ListerWatcher {
	return listOnly{&cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.lists = append(s.lists, fmt.Sprintf("rv=%s limit=%d continue=%s", o.ResourceVersion, o.Limit, o.Continue))
			if s.expireNext && o.ResourceVersion != "" && o.ResourceVersion != "0" {
				s.expireNext = false
				return nil, apierrors.NewResourceExpired("too old resource version")
			}
			a, b := *configMap("a", 4, "x"), *configMap("b", 5, "x")
			switch {
			case o.Continue == "next":
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.ConfigMap{b}}, nil
			case s.pageFirst && o.Limit > 0:
				s.pageFirst = false
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5", Continue: "next"}, Items: []corev1.ConfigMap{a}}, nil
			}
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.ConfigMap{a, b}}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			w := watch.NewRaceFreeFake()
			s.watchers = append(s.watchers, w)
			return w, nil
		},
	}}
}

// relist ends the open watch with 410 Gone and waits for the lists to
// reach n.
func (s *pagingServer) relist(t *testing.T, n int) {
	t.Helper()
	waitFor(t, "an open watch", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.watchers) > 0 && !s.watchers[len(s.watchers)-1].IsStopped()
	})
	s.mu.Lock()
	s.watchers[len(s.watchers)-1].Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	s.mu.Unlock()
	waitFor(t, fmt.Sprintf("%d lists", n), func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.lists) >= n })
}

func (s *pagingServer) run(t *testing.T) {
	t.Helper()
	r := cache.NewReflector(s.lw(), &corev1.ConfigMap{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	r.WatchListPageSize = s.pageSize
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestReflectorListPages proves what `(*Reflector).list` asks of the
// pager: the first list, from resourceVersion "0", in pages of 500; a
// relist from the last resourceVersion with no limit, so that it is no
// exact read (a resourceVersion with a limit is one); a relist answered
// 410 Gone asked again at once from "", by the same pager, so with no
// limit either: one consistent list, whole; once the server paged an
// answer to "0" (a server without a watch cache), every relist in pages
// too, the later pages by continue token alone, and the retry after a 410
// Gone as well; and a WatchListPageSize, when set, is the page size of
// every one of these lists.
func TestReflectorListPages(t *testing.T) {
	t.Parallel()
	t.Run("whole", func(t *testing.T) {
		t.Parallel()
		s := &pagingServer{}
		s.run(t)
		waitFor(t, "the first list", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.lists) == 1 })
		s.relist(t, 2)
		s.mu.Lock()
		s.expireNext = true
		s.mu.Unlock()
		s.relist(t, 4)
		s.mu.Lock()
		defer s.mu.Unlock()
		want := []string{"rv=0 limit=500 continue=", "rv=5 limit=0 continue=", "rv=5 limit=0 continue=", "rv= limit=0 continue="}
		if !slices.Equal(s.lists, want) {
			t.Errorf("lists %q, want %q", s.lists, want)
		}
	})
	t.Run("paged", func(t *testing.T) {
		t.Parallel()
		s := &pagingServer{pageFirst: true}
		s.run(t)
		waitFor(t, "the first list's two pages", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.lists) == 2 })
		s.relist(t, 3)
		s.mu.Lock()
		s.expireNext = true
		s.mu.Unlock()
		s.relist(t, 5)
		s.mu.Lock()
		defer s.mu.Unlock()
		want := []string{"rv=0 limit=500 continue=", "rv= limit=500 continue=next", "rv=5 limit=500 continue=",
			"rv=5 limit=500 continue=", "rv= limit=500 continue="}
		if !slices.Equal(s.lists, want) {
			t.Errorf("paged: lists %q, want %q", s.lists, want)
		}
	})
	t.Run("WatchListPageSize", func(t *testing.T) {
		t.Parallel()
		s := &pagingServer{pageSize: 2}
		s.run(t)
		waitFor(t, "the first list", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.lists) == 1 })
		s.relist(t, 2)
		s.mu.Lock()
		s.expireNext = true
		s.mu.Unlock()
		s.relist(t, 4)
		s.mu.Lock()
		defer s.mu.Unlock()
		want := []string{"rv=0 limit=2 continue=", "rv=5 limit=2 continue=", "rv=5 limit=2 continue=", "rv= limit=2 continue="}
		if !slices.Equal(s.lists, want) {
			t.Errorf("WatchListPageSize 2: lists %q, want %q", s.lists, want)
		}
	})
}

// TestRefusedWatchListFallsBackToList proves: when the server refuses a
// watch with `sendInitialEvents` (422 Invalid, as an API server with its
// WatchList gate off does), the reflector lists instead for that round,
// from "0", and watches from the list's resourceVersion; the next round
// (after a 410 Gone here) tries WatchList again, and lists again, from
// the last resourceVersion seen.
func TestRefusedWatchListFallsBackToList(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var requests []string
	var watchers []*watch.RaceFreeFakeWatcher
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			requests = append(requests, "list rv="+o.ResourceVersion)
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.ConfigMap{*configMap("a", 5, "x")}}, nil
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				requests = append(requests, "watchlist rv="+o.ResourceVersion)
				return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "",
					field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")})
			}
			requests = append(requests, "watch rv="+o.ResourceVersion)
			w := watch.NewRaceFreeFake()
			watchers = append(watchers, w)
			return w, nil
		},
	}
	r := cache.NewReflector(lw, &corev1.ConfigMap{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(watchers) }
	waitFor(t, "the first watch", func() bool { return count() == 1 })
	mu.Lock()
	watchers[0].Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	mu.Unlock()
	waitFor(t, "the second watch", func() bool { return count() == 2 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{"watchlist rv=", "list rv=0", "watch rv=5", "watchlist rv=5", "list rv=5", "watch rv=5"}
	if !slices.Equal(requests, want) {
		t.Errorf("requests %q, want %q", requests, want)
	}
}
