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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// childLife is how long a child lives if nothing ends it: long enough,
// in the runs that expect no death, for three of the mutation detector's
// one-second comparisons (cacheMutationDetector's period in
// tools/cache/mutation_detector.go). A run that expects a death gives
// the child dyingChildLife instead (childLifeEnv), so that a slow
// machine cannot turn a late death into "still alive": the deaths come
// within one comparison period, and the wait costs nothing when they do.
const (
	childLife      = 3 * time.Second
	dyingChildLife = 45 * time.Second // under runAsChild's one minute
	childLifeEnv   = "GUIDE_CHILD_LIFE"
)

// live keeps a child alive for its life, then says so.
func live() {
	life := childLife
	if d, err := time.ParseDuration(os.Getenv(childLifeEnv)); err == nil {
		life = d
	}
	time.Sleep(life)
	os.Stdout.WriteString("still alive\n")
}

// dying is the environment of a child expected to die.
var dying = childLifeEnv + "=" + dyingChildLife.String()

// The children: bodies that end their process, each run by a test in a
// re-executed test binary (runAsChild).
func init() {
	children["handler-panic"] = func() {
		s := newFakeServer("a")
		inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(interface{}) { panic("handler bug") }})
		go inf.Run(make(chan struct{}))
		live()
	}
	children["cache-mutation"] = func() {
		s := newFakeServer("a")
		inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
			obj.(*corev1.ConfigMap).Data["v"] = "written by a handler"
		}})
		go inf.Run(make(chan struct{}))
		live()
	}
	children["watchlist-inconsistent"] = func() {
		// A ListerWatcher that streams one object, and lists two: what
		// a server whose watch cache is wrong would do.
		lw := &cache.ListWatch{
			ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
				fmt.Printf("LIST resourceVersion=%s resourceVersionMatch=%s\n", o.ResourceVersion, o.ResourceVersionMatch)
				return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "2"},
					Items: []corev1.ConfigMap{*configMap("a", 1, "x"), *configMap("b", 2, "x")}}, nil
			},
			WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
				w := watch.NewRaceFreeFake()
				if o.SendInitialEvents != nil && *o.SendInitialEvents {
					w.Add(configMap("a", 1, "x"))
					end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2",
						Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
					w.Action(watch.Bookmark, end)
				}
				return w, nil
			},
		}
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		go inf.RunWithContext(context.Background())
		live()
	}
}

// TestHandlerPanicCrashesTheProcess proves: "a panicking handler crashes
// the process by default": `(*processorListener).run` recovers with
// `utilruntime.HandleCrash`, which logs the panic and panics again while
// `utilruntime.ReallyCrash` is true, its default.
func TestHandlerPanicCrashesTheProcess(t *testing.T) {
	t.Parallel()
	out, code := runAsChild(t, "handler-panic", dying)
	if code != 2 || !strings.Contains(out, "Observed a panic") || !strings.Contains(out, "panic: handler bug") || strings.Contains(out, "still alive") {
		t.Errorf("exit code %d, want 2 (a panic) with the handler's panic logged; output:\n%s", code, out)
	}
}

// TestMutationDetectorPanicsOnAWrittenCacheObject proves:
// "`KUBE_CACHE_MUTATION_DETECTOR=true` makes a mutation fail loudly": the
// detector "compares object and copy, prints `CACHE ... ALTERED` with a
// diff, and panics." It reads the variable at package initialisation,
// hence the child process.
func TestMutationDetectorPanicsOnAWrittenCacheObject(t *testing.T) {
	t.Parallel()
	out, code := runAsChild(t, "cache-mutation", "KUBE_CACHE_MUTATION_DETECTOR=true", dying)
	if code != 2 || !strings.Contains(out, "ALTERED") || strings.Contains(out, "still alive") {
		t.Errorf("exit code %d, want 2 (a panic) after CACHE ... ALTERED; output:\n%s", code, out)
	}
	// Without the variable the same handler goes unnoticed.
	out, code = runAsChild(t, "cache-mutation")
	if code != 0 || !strings.Contains(out, "still alive") {
		t.Errorf("without the detector: exit code %d, want 0; output:\n%s", code, out)
	}
}

// TestWatchListInconsistencyDetectorPanics proves: with
// `KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true`, after a WatchList the
// reflector LISTs the same resourceVersion again (exactly it:
// resourceVersionMatch=Exact) and panics if the streamed objects differ
// from the listed ones, logging the difference, which names the object
// the stream lacked; without the variable it lists nothing.
func TestWatchListInconsistencyDetectorPanics(t *testing.T) {
	t.Parallel()
	out, code := runAsChild(t, "watchlist-inconsistent", "KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true", dying)
	if code != 2 || !strings.Contains(out, "data inconsistency detected") || strings.Contains(out, "still alive") {
		t.Errorf("exit code %d, want 2 (a panic) naming the inconsistency; output:\n%s", code, out)
	}
	if strings.Count(out, "LIST ") != 1 || !strings.Contains(out, "LIST resourceVersion=2 resourceVersionMatch=Exact\n") {
		t.Errorf("want one LIST, at the stream's resourceVersion 2 exactly; output:\n%s", out)
	}
	if !strings.Contains(out, "Previously received data is different") || !strings.Contains(out, `"name": "b"`) {
		t.Errorf("want the difference logged, naming b; output:\n%s", out)
	}
	out, code = runAsChild(t, "watchlist-inconsistent")
	if code != 0 || !strings.Contains(out, "still alive") || strings.Contains(out, "LIST ") {
		t.Errorf("without the detector: exit code %d, want 0 and no LIST; output:\n%s", code, out)
	}
}
