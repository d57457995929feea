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
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// The competing writer: another program (an HPA-like scaler, a human with
// kubectl edit) keeps changing the Bars' Deployments. The controller must
// put them back, but only in answer to each edit: a controller that fights
// back with more writes than it is given, or more and more of them, is in
// a hot loop with the other writer.
const (
	writerBars    = 300
	writerTargets = 50 // the Deployments it edits, bar-00000 on
	writerRound   = 200 * time.Millisecond
	writerEdits   = 10 // per round, the next ones in turn
	// writerRounds is counted, not timed, so that both halves of the
	// fight hold as many edits whatever the machine's pace: 1,200 edits,
	// as many as a timed 30 s fight made on an idle 2-core machine (1,170);
	// 56.5 s with other tests running beside it.
	writerRounds = 120
)

func TestCompetingWriter(t *testing.T) {
	slow(t)
	e := newEnv(t, writerBars)
	c := e.startController(t, "controller", insecureMetrics)
	start := time.Now()
	e.createBars(t)
	e.waitConverged(t, start)
	base := c.waitQuiet(t)

	// Each edit scales the Deployment, changes its image and sets an env
	// var. Replicas and image are the Bar's to decide; the env var is a
	// field the controller does not set, which its apply leaves alone.
	edits, half := 0, 0
	var mid float64
	writerStart := time.Now()
	for round := range writerRounds {
		if round == writerRounds/2 {
			half, mid = edits, writes(c.metrics(t))
		}
		for i := range writerEdits {
			name := fmt.Sprintf("bar-%05d", (round*writerEdits+i)%writerTargets)
			patch := fmt.Sprintf(`{"spec":{"replicas":%d,"template":{"spec":{"containers":[{"name":"app","image":"registry.example/intruder:%d","env":[{"name":"INTRUDER","value":"%d"}]}]}}}}`,
				2+round%3, round, round)
			if _, err := e.kube.AppsV1().Deployments(e.ns).Patch(t.Context(), name, types.StrategicMergePatchType,
				[]byte(patch), metav1.PatchOptions{FieldManager: "intruder"}); err != nil {
				t.Fatalf("the competing writer: %v", err)
			}
			edits++
		}
		time.Sleep(writerRound)
	}
	stoppedAt := time.Now()
	end := writes(c.metrics(t))
	restored := e.waitRestored(t, stoppedAt)
	after := c.waitQuiet(t)
	took := e.waitConverged(t, start)

	first, second := mid-writes(base), end-mid
	total := writes(after) - writes(base)
	record(t, fmt.Sprintf("competing writer, %d edits of %d Deployments: restored after it stops", edits, writerTargets), restored)
	t.Logf("writer: %d edits in %v (%d in the first half); controller: %v writes in the first half, %v in the second, %v in all (%.2f per edit); restored %v after the writer stopped; all checks %v after the first create",
		edits, stoppedAt.Sub(writerStart).Round(100*time.Millisecond), half, first, second, total, total/float64(edits), restored, took)

	// Per edit the controller applies the Deployment once; its Events fold
	// into one series per Bar (tools/events writes the first and the
	// second, then counts), so 1.09 writes per edit were measured, 2.00
	// with tools/record's one Event per edit. The status does not change,
	// as no kube-controller-manager updates the Deployment's status here. A
	// controller that applied on every sync, changed or not, made 3.05
	// (each of its own writes comes back as an event and a sync); a hot
	// loop has no bound at all.
	if limit := 2.5 * float64(edits); total > limit {
		t.Errorf("the controller wrote %v times for %d edits, want at most %v: it fights the writer", total, edits, limit)
	}
	// A hot loop grows: the second half must not cost much more than the
	// first, for as many edits (the halves are counted in rounds). The 50
	// are the writes of edits made just before the middle that land just
	// after it.
	if second > 1.5*first+50 {
		t.Errorf("controller writes grew from %v in the first %d edits to %v in the next %d", first, half, second, edits-half)
	}
	// And once the writer is gone, so are the writes: a count over 5 s,
	// in which a hot loop (a write every few milliseconds) would show
	// hundreds; the length only sets how sure that is, a slow machine
	// cannot make a quiet controller write.
	time.Sleep(5 * time.Second)
	if idle := writes(c.metrics(t)) - writes(after); idle != 0 {
		t.Errorf("%v writes in 5 s after everything was restored, want 0", idle)
	}
}

// waitRestored waits until every Bar's Deployment has the Bar's replicas
// and image again, and returns the time since (recorded, not judged; 0.04
// and 0.13 s measured). The 2 minutes are a hang bound.
func (e *env) waitRestored(t *testing.T, since time.Time) time.Duration {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		bars, err := e.bars.BarcontrollerV1().Bars(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		deps, err := e.kube.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		byName := map[string]int{}
		for i, d := range deps.Items {
			byName[d.Name] = i
		}
		wrong := 0
		for _, b := range bars.Items {
			if b.Name == "blocked" {
				continue // it wants foreign-0, which stays foreign
			}
			i, ok := byName[b.Spec.Deployment.Name]
			if !ok {
				// A Deployment the writer's fight left missing is the
				// worst case of not restored, not a pass.
				wrong++
				last = fmt.Sprintf("%d Deployments differ from their Bars, e.g. %s: missing", wrong, b.Spec.Deployment.Name)
				continue
			}
			d := &deps.Items[i]
			spec := d.Spec.Template.Spec
			if ptr.Deref(d.Spec.Replicas, -1) != ptr.Deref(b.Spec.Replicas, 1) || len(spec.Containers) != 1 || spec.Containers[0].Image != b.Spec.Template.Image {
				wrong++
				last = fmt.Sprintf("%d Deployments differ from their Bars, e.g. %s: replicas %d, containers %v", wrong, d.Name, ptr.Deref(d.Spec.Replicas, -1), spec.Containers)
			}
		}
		return wrong == 0, nil
	})
	if err != nil {
		t.Fatalf("waiting for the Deployments to be restored: %v (%s)", err, last)
	}
	return time.Since(since)
}
