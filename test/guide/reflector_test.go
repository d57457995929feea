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
	"errors"
	"os"
	"reflect"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestReflectorBackoffBounds proves: the `defaultBackoff*` constants
// "make a base of 800 ms that doubles up to a cap of 30 s, and jitter 1.0
// adds up to the base again, so the first wait lies in [0.8 s, 1.6 s)
// and, once the base is capped, every wait in [30 s, 60 s). The base
// goes back to 800 ms at the first wait asked for more than 2 minutes
// after the last reset ..., whether or not the rounds in between failed."
//
// The waits are asked of the reflector's own delay function (its
// unexported delayHandler, read by reflection: client-go exports no way
// to see the default), on a fake clock, so no test waits them out. A
// wait is asked every second, as a reflector failing over and over
// would: the reset still comes after 2 minutes, which a reset "after 2
// minutes of health" would not do. That the jitter reaches into the
// upper half of [base, 2·base) is checked over the 114 capped waits:
// with jitter 1.0 all of them stay in the lower half with probability
// 2^-114; without jitter, always.
func TestReflectorBackoffBounds(t *testing.T) {
	start := time.Now()
	clock := clocktesting.NewFakeClock(start)
	r := cache.NewReflectorWithOptions(newFakeServer().lw(), &corev1.ConfigMap{}, cache.NewStore(cache.MetaNamespaceKeyFunc),
		cache.ReflectorOptions{Clock: clock})
	f := reflect.ValueOf(r).Elem().FieldByName("delayHandler")
	delay := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(wait.DelayFunc)

	base := 800 * time.Millisecond
	upperHalf := 0
	for i := 0; ; i++ {
		d := delay()
		if clock.Since(start) > 2*time.Minute {
			// The first wait asked more than 2 minutes after the
			// reflector was made: back to the start, failures or not.
			if d < 800*time.Millisecond || d >= 1600*time.Millisecond {
				t.Errorf("wait %d, %v after the last reset, is %v; want it back in [0.8s, 1.6s)", i+1, clock.Since(start), d)
			}
			break
		}
		if d < base || d >= 2*base {
			t.Fatalf("wait %d is %v, want it in [%v, %v)", i+1, d, base, 2*base)
		}
		if base == 30*time.Second && d >= 45*time.Second {
			upperHalf++
		}
		base = min(2*base, 30*time.Second)
		clock.Step(time.Second)
	}
	if upperHalf == 0 {
		t.Error("no capped wait reached [45s, 60s): the waits are not jittered by up to the base")
	}
}

// TestNormalWatchEndReopensWithoutRelist proves: "A watch the server ends
// normally ... is reopened from `LastSyncResourceVersion`, with no
// relist."
func TestNormalWatchEndReopensWithoutRelist(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	inf := startInformer(t, s, 0)
	// b at 2: the reflector's resourceVersion moves to 2, and a watch
	// that delivered an event is not "very short" (which would end the
	// round).
	s.set("b", "x", true)
	waitFor(t, "the reflector at 2", func() bool { return inf.LastSyncResourceVersion() == "2" })
	s.closeWatches()
	waitFor(t, "a second watch", func() bool { _, w := s.counts(); return w == 2 })
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lists) != 1 || s.watches[1].ResourceVersion != "2" {
		t.Errorf("%d lists, second watch from %q; want 1 list and a watch from 2", len(s.lists), s.watches[1].ResourceVersion)
	}
}

// TestTooManyRequestsRewatchesWithoutRelist proves: `(*Reflector).watch`
// "opens the watch again, after a backoff and from
// `LastSyncResourceVersion`, with no relist, when it could not be opened
// because ... the server answered 429 ..., and when it ended with a
// 429".
func TestTooManyRequestsRewatchesWithoutRelist(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	inf := startInformer(t, s, 0)
	s.set("b", "x", true)
	waitFor(t, "the reflector at 2", func() bool { return inf.LastSyncResourceVersion() == "2" })

	// The open watch ends with a 429.
	s.sendEvent(watch.Event{Type: watch.Error, Object: &apierrors.NewTooManyRequests("slow down", 1).ErrStatus})
	waitFor(t, "a watch after the 429 event", func() bool { _, w := s.counts(); return w == 2 })
	// c at 3 on the second watch (again so that it is not "very short"),
	// then it closes and the next one cannot be opened: 429 again.
	s.set("c", "x", true)
	waitFor(t, "the reflector at 3", func() bool { return inf.LastSyncResourceVersion() == "3" })
	s.mu.Lock()
	s.watchErr = apierrors.NewTooManyRequests("slow down", 1)
	s.mu.Unlock()
	s.closeWatches()
	waitFor(t, "a watch after the refused one", func() bool { _, w := s.counts(); return w == 4 })
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lists) != 1 {
		t.Errorf("%d lists, want 1: a 429 is no reason to relist", len(s.lists))
	}
	for i, want := range []string{"1", "2", "3", "3"} {
		if got := s.watches[i].ResourceVersion; got != want {
			t.Errorf("watch %d from %q, want %s", i+1, got, want)
		}
	}
}

// TestGoneEndsTheRoundWithARelist proves: "Any other error, *410 Gone*
// included, ends the round; the next round starts over ... so the cache
// is rebuilt from a full snapshot."
func TestGoneEndsTheRoundWithARelist(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	startInformer(t, s, 0)
	s.expire()
	waitFor(t, "a relist and a new watch", func() bool { l, w := s.counts(); return l == 2 && w == 2 })
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := s.lists[1].ResourceVersion; got != "1" {
		t.Errorf("the relist after 410 Gone asked from %q, want the last resourceVersion seen, 1", got)
	}
}

// TestWhichWatchEndsRelist proves, on a reflector whose clock is fake
// (it times each watch, and the backoff inside `(*Reflector).watch`):
// a watch that closes without an event before its clock has moved a
// second is a `VeryShortWatchError`, and the round ends: a relist from
// the last resourceVersion; one that closes after a second without an
// event is reopened from it with no relist; a watch refused with a
// refused connection is asked again only once the backoff has passed on
// that clock, with no relist; a watch refused otherwise (403) and one
// ended by an internal error (shared informers leave
// `MaxInternalErrorRetryDuration` at zero) end the round. The rounds'
// own backoff is on the real clock (`(*Reflector).RunWithContext`), so
// each relist comes about a second later.
func TestWhichWatchEndsRelist(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	clk := clocktesting.NewFakeClock(time.Now())
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := cache.NewReflectorWithOptions(s.lw(), &corev1.ConfigMap{}, store, cache.ReflectorOptions{Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	at := func(lists, watches int) func() bool {
		return func() bool { l, w := s.counts(); return l == lists && w == watches }
	}
	waitFor(t, "the first list and watch", at(1, 1))
	s.set("b", "x", true) // rv 2, an event on the first watch
	waitFor(t, "the reflector at 2", func() bool { return r.LastSyncResourceVersion() == "2" })
	s.closeWatches() // not very short: it had an event
	waitFor(t, "a second watch", at(1, 2))

	s.closeWatches() // no event, the clock still: very short
	waitFor(t, "a relist after a very short watch", at(2, 3))

	clk.Step(time.Second)
	s.closeWatches() // no event, a second on the clock: a normal end
	waitFor(t, "a watch reopened", at(2, 4))

	s.mu.Lock()
	s.watchErr = &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}
	s.mu.Unlock()
	clk.Step(time.Second)
	s.closeWatches()
	waitFor(t, "the refused watch and the backoff's wait", func() bool { return at(2, 5)() && clk.HasWaiters() })
	if l, w := s.counts(); l != 2 || w != 5 {
		t.Fatalf("before the backoff passed: %d lists, %d watches; want 2 and 5", l, w)
	}
	clk.Step(2 * time.Minute) // past any backoff (at most 60 s)
	waitFor(t, "a watch after the backoff", at(2, 6))

	s.mu.Lock()
	s.watchErr = apierrors.NewForbidden(corev1.Resource("configmaps"), "", errors.New("no"))
	s.mu.Unlock()
	clk.Step(time.Second)
	s.closeWatches()
	waitFor(t, "a relist after a 403", at(3, 8))

	clk.Step(time.Second)
	s.sendEvent(watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(errors.New("etcd")).ErrStatus})
	waitFor(t, "a relist after an internal error", at(4, 9))

	s.mu.Lock()
	defer s.mu.Unlock()
	for i, want := range []string{"0", "2", "2", "2"} {
		if got := s.lists[i].ResourceVersion; got != want {
			t.Errorf("list %d from %q, want %s", i+1, got, want)
		}
	}
	for i, want := range []string{"1", "2", "2", "2", "2", "2", "2", "2", "2"} {
		if got := s.watches[i].ResourceVersion; got != want {
			t.Errorf("watch %d from %q, want %s", i+1, got, want)
		}
	}
}

// TestGVKIsCheckedOnlyForUnstructured proves: `handleAnyWatch` "checks
// the object's type (and, only for an `Unstructured` informer, its GVK)":
// a typed reflector drops an object of another Go type and stores one of
// its own whatever kind its TypeMeta claims; an Unstructured one drops an
// object of another kind.
func TestGVKIsCheckedOnlyForUnstructured(t *testing.T) {
	t.Parallel()
	run := func(expected runtime.Object, list runtime.Object, events ...runtime.Object) []string {
		w := watch.NewRaceFreeFake()
		lw := listOnly{&cache.ListWatch{
			ListFunc:  func(metav1.ListOptions) (runtime.Object, error) { return list, nil },
			WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return w, nil },
		}}
		store := cache.NewStore(cache.MetaNamespaceKeyFunc)
		r := cache.NewReflector(lw, expected, store, 0)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); r.Run(stop) }()
		for _, e := range events {
			w.Add(e)
		}
		marker := events[len(events)-1].(metav1.Object).GetName()
		waitFor(t, "the last event stored", func() bool { _, ok, _ := store.GetByKey("ns/" + marker); return ok })
		close(stop)
		<-done
		return store.ListKeys()
	}

	secretKind := configMap("claims-secret", 2, "x")
	secretKind.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
	otherType := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a-secret", ResourceVersion: "3"}}
	keys := run(&corev1.ConfigMap{}, &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}},
		secretKind, otherType, configMap("last", 4, "x"))
	sort.Strings(keys)
	if !slices.Equal(keys, []string{"ns/claims-secret", "ns/last"}) {
		t.Errorf("typed reflector stored %v, want the two ConfigMaps and not the *corev1.Secret", keys)
	}

	u := func(kind, name, rv string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind(kind)
		o.SetNamespace("ns")
		o.SetName(name)
		o.SetResourceVersion(rv)
		return o
	}
	expected := &unstructured.Unstructured{}
	expected.SetAPIVersion("v1")
	expected.SetKind("ConfigMap")
	list := &unstructured.UnstructuredList{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMapList"}}
	list.SetResourceVersion("1")
	keys = run(expected, list, u("Secret", "claims-secret", "2"), u("ConfigMap", "last", "3"))
	if len(keys) != 1 || keys[0] != "ns/last" {
		t.Errorf("Unstructured reflector stored %v, want only ns/last", keys)
	}
}
