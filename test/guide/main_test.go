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
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The real API servers are started on first use by a test that needs
// one (running only the in-memory proofs costs nothing) and stopped by
// TestMain: etcd and kube-apiserver, nothing else. The second has the
// ShardedListAndWatch feature gate on (sharding_test.go); the first has
// the defaults of the version, where it is off.
var (
	plainServer   = &lazyServer{}
	shardedServer = &lazyServer{flags: []string{"--feature-gates=ShardedListAndWatch=true"}}
)

// lazyServer is one API server, started by the first test that asks.
type lazyServer struct {
	flags []string
	once  sync.Once
	c     *localcluster.Cluster
	err   error
	dir   string
}

func (s *lazyServer) stop() {
	if s.c != nil {
		s.c.Stop()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// get returns an admin client configuration for the server, and a
// namespace of the test's own.
func (s *lazyServer) get(t *testing.T) (*rest.Config, string) {
	t.Helper()
	localcluster.SkipWithoutBinaries(t)
	s.once.Do(func() {
		s.dir, s.err = os.MkdirTemp("", "bar-guide-")
		if s.err != nil {
			return
		}
		s.c, s.err = localcluster.Start(context.Background(), localcluster.Options{Dir: s.dir, APIServerFlags: s.flags})
	})
	if s.err != nil {
		t.Fatalf("starting kube-apiserver %v: %v", s.flags, s.err)
	}
	cfg := rest.CopyConfig(s.c.Config)
	ns := fmt.Sprintf("guide-%d", time.Now().UnixNano())
	if _, err := typedClient(t, cfg).CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cfg, ns
}

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		// A re-executed test binary runs one child body and nothing else.
		runChild(child)
		os.Exit(0)
	}
	code := m.Run()
	plainServer.stop()
	shardedServer.stop()
	os.Exit(code)
}

// realServer returns an admin client configuration for the shared API
// server with the version's default gates, and a namespace of the test's
// own.
func realServer(t *testing.T) (*rest.Config, string) {
	t.Helper()
	return plainServer.get(t)
}

func typedClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeServer is an in-memory API for ConfigMaps that a test steers
// event by event: it can change an object and tell the watch (send), or
// change it and not tell (drop), as a lost event would. Its ListWatch
// answers lists from the current state and counts them.
type fakeServer struct {
	mu       sync.Mutex
	rv       int
	objs     map[string]*corev1.ConfigMap
	watchers []*watch.RaceFreeFakeWatcher
	lists    []metav1.ListOptions
	watches  []metav1.ListOptions
	// watchErr, if set, is returned by the next watch request instead of
	// a stream (and then cleared).
	watchErr error
}

func newFakeServer(names ...string) *fakeServer {
	s := &fakeServer{objs: map[string]*corev1.ConfigMap{}}
	for _, n := range names {
		s.rv++
		s.objs[n] = configMap(n, s.rv, "v0")
	}
	return s
}

func configMap(name string, rv int, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.Itoa(rv)},
		Data:       map[string]string{"v": value},
	}
}

// set changes (or creates) an object; send says whether the open watch
// hears of it.
func (s *fakeServer) set(name, value string, send bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	_, existed := s.objs[name]
	cm := configMap(name, s.rv, value)
	s.objs[name] = cm
	if !send {
		return
	}
	typ := watch.Modified
	if !existed {
		typ = watch.Added
	}
	for _, w := range s.watchers {
		if !w.IsStopped() {
			w.Action(typ, cm.DeepCopy())
		}
	}
}

// remove deletes an object; send says whether the watch hears of it.
func (s *fakeServer) remove(name string, send bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	cm := s.objs[name]
	delete(s.objs, name)
	if !send {
		return
	}
	cm = cm.DeepCopy()
	cm.ResourceVersion = strconv.Itoa(s.rv)
	for _, w := range s.watchers {
		if !w.IsStopped() {
			w.Delete(cm)
		}
	}
}

// sendEvent puts a raw event on the open watches: an error or a bookmark.
func (s *fakeServer) sendEvent(ev watch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watchers {
		if !w.IsStopped() {
			w.Action(ev.Type, ev.Object)
		}
	}
}

// expire ends the open watches with 410 Gone, as an API server does
// when the watch's resourceVersion has left its window: a relist follows.
func (s *fakeServer) expire() {
	s.sendEvent(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version").ErrStatus})
}

// closeWatches ends the open watches the way a server ends one whose
// timeout is up: the stream just closes.
func (s *fakeServer) closeWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watchers {
		if !w.IsStopped() {
			w.Stop()
		}
	}
}

func (s *fakeServer) counts() (lists, watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lists), len(s.watches)
}

func (s *fakeServer) list(opts metav1.ListOptions) *corev1.ConfigMapList {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists = append(s.lists, opts)
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
	for _, cm := range s.objs {
		l.Items = append(l.Items, *cm.DeepCopy())
	}
	return l
}

func (s *fakeServer) watch(opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watches = append(s.watches, opts)
	if err := s.watchErr; err != nil {
		s.watchErr = nil
		return nil, err
	}
	w := watch.NewRaceFreeFake()
	s.watchers = append(s.watchers, w)
	return w, nil
}

// lw is the server as a ListerWatcher that does not stream lists, as a
// fake clientset does not: informers on it LIST, then WATCH.
func (s *fakeServer) lw() cache.ListerWatcher {
	return listOnly{&cache.ListWatch{
		ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { return s.list(o), nil },
		WatchFunc: s.watch,
	}}
}

// listOnly marks a ListerWatcher as one that cannot stream the initial
// list (util/watchlist.DoesClientNotSupportWatchListSemantics).
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// event is one handler call as a recorder saw it.
type event struct {
	Kind        string // add, update, delete
	Name        string
	OldRV, RV   string
	Same        bool // update: old and new are the one cached object
	Tombstone   bool // delete: a DeletedFinalStateUnknown
	InitialList bool
}

func (e event) String() string {
	return fmt.Sprintf("%s %s %s->%s same=%v tombstone=%v initial=%v", e.Kind, e.Name, e.OldRV, e.RV, e.Same, e.Tombstone, e.InitialList)
}

// recorder is a handler that writes down every call.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) OnAdd(obj interface{}, initial bool) {
	cm := obj.(*corev1.ConfigMap)
	r.add(event{Kind: "add", Name: cm.Name, RV: cm.ResourceVersion, InitialList: initial})
}

func (r *recorder) OnUpdate(oldObj, newObj interface{}) {
	o, n := oldObj.(*corev1.ConfigMap), newObj.(*corev1.ConfigMap)
	r.add(event{Kind: "update", Name: n.Name, OldRV: o.ResourceVersion, RV: n.ResourceVersion, Same: o == n})
}

func (r *recorder) OnDelete(obj interface{}) {
	e := event{Kind: "delete"}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		e.Tombstone = true
		obj = t.Obj
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		e.Name, e.RV = cm.Name, cm.ResourceVersion
	}
	r.add(e)
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns the events so far and forgets them.
func (r *recorder) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// snapshot returns a copy of the events so far.
func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// waitFor polls cond every 10 ms; the 10 s only bound a hang: what the
// proofs wait for takes milliseconds (or the one-second minimum resync).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startInformer runs a shared informer of the fake server's ConfigMaps
// until the test ends, and waits for its first list.
func startInformer(t *testing.T, s *fakeServer, resync time.Duration, handlers ...cache.ResourceEventHandler) cache.SharedIndexInformer {
	t.Helper()
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, resync, cache.Indexers{})
	for _, h := range handlers {
		if _, err := inf.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	runInformer(t, inf)
	return inf
}

// runInformer runs inf until the test ends (and waits for it to stop, so
// that no goroutine outlives the test), and waits for its first list.
func runInformer(t *testing.T, inf cache.SharedIndexInformer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
}

// childEnv names the variable that makes the test binary run one child
// body (runChild) instead of the tests: a proof that the process dies
// must watch another process die.
const childEnv = "GUIDE_CHILD"

var children = map[string]func(){}

func runChild(name string) {
	f, ok := children[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "no child %q\n", name)
		os.Exit(3)
	}
	f()
}

// runAsChild re-executes the test binary with child's body and env, and
// returns its combined output and exit code.
func runAsChild(t *testing.T, child string, env ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+child), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
