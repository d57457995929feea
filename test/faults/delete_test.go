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

package faults

import (
	"context"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// 2,000 converged Bars are deleted in one request (kubectl delete bars
// --all, a namespace being emptied): 2,000 watch events at once. Deleting
// their Deployments is the garbage collector's job, and this control
// plane has none, so the controller must do nothing at all: no write for
// a Bar that is gone (that would recreate or fight over its Deployment),
// no error retried with backoff, no Event, and a queue back to empty.
func TestTwoThousandBarsDeletedAtOnce(t *testing.T) {
	slow(t)
	e := newEnv(t, 2000)
	c := e.startController(t, "controller", insecureMetrics)
	start := time.Now()
	e.createBars(t)
	e.waitConverged(t, start)
	base := c.waitQuiet(t)
	ctx := t.Context()
	deps, err := e.kube.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events := eventVersions(t, e)

	// All but the blocked one, which must stay as it is.
	deleteAt := time.Now()
	if err := e.bars.BarcontrollerV1().Bars(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "metadata.name!=blocked"}); err != nil {
		t.Fatal(err)
	}
	e.orphans, e.n = e.n, 0
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		bars, err := e.bars.BarcontrollerV1().Bars(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(bars.Items) == 1, err
	})
	if err != nil {
		t.Fatalf("waiting for the Bars to go: %v", err)
	}
	gone := time.Since(deleteAt)
	// A fence: a label on the blocked Bar, which comes after the 2,000
	// deletions in the watch and costs no write. Once the controller has
	// enqueued it, its informer has handed over every deletion; once the
	// queue has drained, their consequences, if any, have happened.
	if _, err := e.bars.BarcontrollerV1().Bars(e.ns).Patch(ctx, "blocked", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"fence":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return queueAdds(c.metrics(t)) > queueAdds(base), nil
	})
	if err != nil {
		t.Fatalf("the controller never saw the fence after the deletions:%s", c.LogTail(20))
	}
	drained := c.waitDrained(t, deleteAt)
	m := c.metrics(t)

	// A Bar created now must still converge: the controller is not wedged.
	if _, err := e.bars.BarcontrollerV1().Bars(e.ns).Create(ctx, &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "after-delete"},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "after-delete"}, Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.n = 1
	took := e.waitConverged(t, deleteAt)
	record(t, "2,000 Bars deleted at once: until the queue is empty after them", drained)
	record(t, "2,000 Bars deleted at once: a new Bar converged, from the delete", took)
	t.Logf("Bars gone %v after the delete, queue empty after %v; a new Bar converged %v after the delete", gone, drained, took)

	if n := writes(m) - writes(base); n != 0 {
		t.Errorf("the controller wrote %v times after the Bars were deleted, want 0", n)
	}
	if n := syncErrors(m) - syncErrors(base); n != 0 {
		t.Errorf("%v sync errors after the Bars were deleted, want 0:%s", n, c.LogTail(20))
	}
	for _, ev := range newEvents(t, e, events) {
		if ev.Regarding.Name != "after-delete" {
			t.Errorf("Event after the delete: %s %s on %s: %s (series %v)", ev.Type, ev.Reason, ev.Regarding.Name, ev.Note, ev.Series)
		}
	}
	// Nothing touched the orphaned Deployments either (not even a status or
	// label write some other path might make).
	now, err := e.kube.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := map[string]string{}
	for _, d := range now.Items {
		rv[d.Name] = d.ResourceVersion
	}
	for _, d := range deps.Items {
		if rv[d.Name] != d.ResourceVersion {
			t.Errorf("Deployment %s changed after its Bar was deleted: resourceVersion %s, was %s", d.Name, rv[d.Name], d.ResourceVersion)
		}
	}
}

// waitDrained waits until the controller's work queue has been empty for
// 2 s, and returns the time since (recorded, not judged). The 2 minutes
// are a hang bound, as are the other waits of this case.
func (c *controller) waitDrained(t *testing.T, since time.Time) time.Duration {
	t.Helper()
	var emptySince time.Time
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		depth, found := c.metrics(t).Value("workqueue_depth", map[string]string{"name": "bars"})
		switch {
		case !found || depth > 0:
			emptySince = time.Time{}
		case emptySince.IsZero():
			emptySince = time.Now()
		}
		return !emptySince.IsZero() && time.Since(emptySince) >= 2*time.Second, nil
	})
	if err != nil {
		t.Fatalf("the work queue never drained:%s", c.LogTail(20))
	}
	return emptySince.Sub(since)
}

func queueAdds(m localcluster.Metrics) float64 {
	v, _ := m.Value("workqueue_adds_total", map[string]string{"name": "bars"})
	return v
}

// eventVersions is the resourceVersion of every Event in e's namespace, by
// name. The controller writes events.k8s.io/v1 Events: a repeat turns the
// first into a series and patches its series.count and lastObservedTime,
// leaving the core/v1 count (deprecatedCount) as it was, so only the
// resourceVersion tells every write apart.
func eventVersions(t *testing.T, e *env) map[string]string {
	t.Helper()
	list, err := e.kube.EventsV1().Events(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := map[string]string{}
	for _, ev := range list.Items {
		rv[ev.Name] = ev.ResourceVersion
	}
	return rv
}

// newEvents returns the Events in e's namespace written since before (by
// eventVersions): new ones and repeats of old ones.
func newEvents(t *testing.T, e *env, before map[string]string) []eventsv1.Event {
	t.Helper()
	list, err := e.kube.EventsV1().Events(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if rv, ok := before[ev.Name]; !ok || rv != ev.ResourceVersion {
			out = append(out, ev)
		}
	}
	return out
}
