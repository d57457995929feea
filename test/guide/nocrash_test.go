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
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
)

// noCrashReport is the one line the "handler-panic-no-crash" child
// prints: which object's add panicked, which notification came next and
// how long after the panic, whether the panicked object's later update
// still arrived, and the registration's HasSynced at the end.
var noCrashReport = regexp.MustCompile(`report: panicked=(\S+) next=(\S+) gap_ms=(\d+) later=(\S+) registration_synced=(\S+) informer_synced=(\S+)`)

func init() {
	children["handler-panic-no-crash"] = func() {
		utilruntime.ReallyCrash = false
		s := newFakeServer("a", "b")
		calls := make(chan string, 10)
		first := true
		var panicked string
		var panicAt time.Time
		inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
		reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			// The listener calls its handler from one goroutine, in order:
			// first, panicked and panicAt need no lock.
			AddFunc: func(obj interface{}) {
				name := obj.(*corev1.ConfigMap).Name
				if first {
					first, panicked, panicAt = false, name, time.Now()
					panic("handler bug")
				}
				calls <- "add-" + name + " " + strconv.FormatInt(time.Since(panicAt).Milliseconds(), 10)
			},
			UpdateFunc: func(_, obj interface{}) { calls <- "update-" + obj.(*corev1.ConfigMap).Name + " 0" },
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go inf.RunWithContext(ctx)
		next := func() (string, string) {
			select {
			case c := <-calls:
				what, ms, _ := strings.Cut(c, " ")
				return what, ms
			case <-time.After(dyingChildLife):
				return "none", "0"
			}
		}
		nextCall, gap := next() // the other initial add
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			fmt.Println("informer did not sync")
			return
		}
		// The object whose add was skipped still gets its later events.
		s.set(panicked, "v1", true)
		later, _ := next()
		fmt.Printf("report: panicked=%s next=%s gap_ms=%s later=%s registration_synced=%v informer_synced=%v\n",
			panicked, nextCall, gap, later, reg.HasSynced(), inf.HasSynced())
		os.Stdout.Sync()
	}
}

// TestHandlerPanicWithoutReallyCrashSkipsTheNotification proves: with
// `utilruntime.ReallyCrash` false, a handler's panic is logged and the
// process goes on, but the notification it panicked on is skipped for
// good: `(*processorListener).run` sleeps a second before the next one,
// and the object's later update arrives while its add never does. A
// skipped add from the initial list also leaves the registration's
// HasSynced false for good, while the informer's is true: nothing waiting
// on the registration ever starts.
//
// The one-second sleep is shown as a lower bound only (time.Sleep never
// returns early): with no sleep the next add would come within
// microseconds, and the test would fail. No upper bound, which a slow
// machine could break.
func TestHandlerPanicWithoutReallyCrashSkipsTheNotification(t *testing.T) {
	t.Parallel()
	out, code := runAsChild(t, "handler-panic-no-crash")
	m := noCrashReport.FindStringSubmatch(out)
	if code != 0 || !strings.Contains(out, "Observed a panic") || m == nil {
		t.Fatalf("exit code %d, want 0 with the panic logged and a report; output:\n%s", code, out)
	}
	panicked, next, later := m[1], m[2], m[4]
	other := map[string]string{"a": "b", "b": "a"}[panicked]
	if next != "add-"+other {
		t.Errorf("after the panic on %s's add the handler got %s, want add-%s (and never add-%s)", panicked, next, other, panicked)
	}
	if gap, _ := strconv.Atoi(m[3]); gap < 1000 {
		t.Errorf("the next notification came %d ms after the panic, want at least 1000: the listener sleeps a second", gap)
	}
	if later != "update-"+panicked {
		t.Errorf("after the informer synced, the handler got %s, want update-%s", later, panicked)
	}
	if m[5] != "false" || m[6] != "true" {
		t.Errorf("registration synced %s, informer synced %s; want false and true", m[5], m[6])
	}
}
