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
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// SIGTERM while a sync is in the middle of its writes (a slow webhook holds
// its Deployment apply): the sync must finish, with its status and its
// Event, and the controller then exit 0.
func TestSIGTERMFinishesSyncWithItsEvent(t *testing.T) {
	quick(t)
	e := newEnv(t, 0)
	const deployment = "held-web"
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.startHook(t, "request.resource.resource == 'deployments' && request.name == '"+deployment+"'",
		func(ctx context.Context, _ *admissionv1.AdmissionRequest) {
			once.Do(func() { close(entered) })
			select {
			case <-ctx.Done():
			case <-release:
			}
		},
		func(ctx context.Context) error {
			labels := map[string]string{"app": "probe"}
			_, err := e.kube.AppsV1().Deployments(e.ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: deployment},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/probe:1"}}},
				}},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})

	c := e.startController(t, "controller", insecureMetrics)
	c.waitReady(t, time.Now())
	bar, err := e.bars.BarcontrollerV1().Bars(e.ns).Create(t.Context(), &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "held"},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: deployment}, Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The waits of this case are hang bounds; it judges what was written.
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the controller's apply of %s never reached the webhook:%s", deployment, c.LogTail(20))
	}
	stopAt := time.Now()
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The controller has taken the signal in by now; then the apply goes on.
	waitLog(t, c.Process, 10*time.Second, "Shutting down: finishing syncs in progress")
	time.Sleep(time.Second)
	close(release)
	select {
	case <-c.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:%s", c.LogTail(20))
	}
	record(t, "SIGTERM during a sync's apply: exit 0 after the sync and its Event", c.ExitedAt().Sub(stopAt))
	if code := c.State().ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0:%s", code, c.LogTail(20))
	}

	ctx := t.Context()
	if _, err := e.kube.AppsV1().Deployments(e.ns).Get(ctx, deployment, metav1.GetOptions{}); err != nil {
		t.Errorf("the sync in progress did not create its Deployment: %v", err)
	}
	if got, err := e.bars.BarcontrollerV1().Bars(e.ns).Get(ctx, bar.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("the sync in progress did not write the Bar's status: %+v", got.Status)
	}
	evs, err := e.kube.EventsV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range evs.Items {
		if ev.Regarding.Name != bar.Name {
			continue
		}
		reasons = append(reasons, ev.Reason)
		if ev.Reason == "DeploymentCreated" {
			return
		}
	}
	t.Errorf("no DeploymentCreated Event for Bar %s after the sync finished during the shutdown; its Events: %q", bar.Name, reasons)
}
