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

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// The objects every scenario creates. Bars ask for what the examples ask
// for; the image is never pulled (there are no nodes).
const benchImage = "registry.example/app:1.0"

func benchBar(ns string, i int) *barv1.Bar {
	name := fmt.Sprintf("bar-%05d", i)
	return &barv1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       barv1.BarSpec{Deployment: barv1.BarDeployment{Name: name}, Replicas: ptr.To[int32](2), Template: barv1.BarPodTemplate{Image: benchImage}},
	}
}

// floorDeployment is the Deployment an ideal controller would create for
// bar: the same labels, selector, owner reference and template the real
// one sends (deployment.go), so the floor pays for objects of the same
// size.
func floorDeployment(bar *barv1.Bar) *appsv1.Deployment {
	labels := map[string]string{"barcontroller.dev/bar": bar.Name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: bar.Spec.Deployment.Name, Namespace: bar.Namespace,
			Labels: map[string]string{"barcontroller.dev/bar": bar.Name, "app.kubernetes.io/managed-by": "bar-controller"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar", Name: bar.Name, UID: bar.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: bar.Spec.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: bar.Spec.Template.Image}}},
			},
		},
	}
}

// parallel runs fn for 0..n-1 on inflight goroutines and returns the first
// error.
func parallel(ctx context.Context, n, inflight int, fn func(ctx context.Context, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// runFloor is the floor: per Bar, the three writes a controller with zero
// overhead would make, in order (create the Bar, create its Deployment,
// write the Bar's status), many Bars in flight, no watch, no event.
// A request the API server timed out, or whose connection was lost, is
// done again, up to twice, said on stderr and counted in the returned
// number: at 50,000 Bars on 2 cores one of 150,000 occasionally is, and
// it must not throw the whole row away. floorWrites is safe to repeat.
func runFloor(ctx context.Context, w writers, ns string, n, inflight int) (int, error) {
	var again atomic.Int64
	err := parallel(ctx, n, inflight, func(ctx context.Context, i int) error {
		for attempt := 1; ; attempt++ {
			err := floorWrites(ctx, w, ns, i)
			if err == nil || attempt == 3 || !(timedOut(err) || lostConnection(err)) {
				return err
			}
			again.Add(1)
			fmt.Fprintf(os.Stderr, "bench: floor: Bar %d: %v; again\n", i, err)
		}
	})
	return int(again.Load()), err
}

// lostConnection is client-go's HTTP/2 health check giving up on the API
// server (no answer to a ping), or the server closing the connection under
// a request: the request may or may not have been done.
func lostConnection(err error) bool {
	return strings.Contains(err.Error(), "http2: client connection lost") || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// writers are the bench's own clients, with no client-side rate limit.
type writers struct {
	kube kubernetes.Interface
	bars clientset.Interface
}

func floorWrites(ctx context.Context, w writers, ns string, i int) error {
	bar, err := w.bars.BarcontrollerV1().Bars(ns).Create(ctx, benchBar(ns, i), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Done again after a timeout that had created it after all.
		bar, err = w.bars.BarcontrollerV1().Bars(ns).Get(ctx, benchBar(ns, i).Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	if _, err := w.kube.AppsV1().Deployments(ns).Create(ctx, floorDeployment(bar), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	bar.Status = floorStatus(bar)
	_, err = w.bars.BarcontrollerV1().Bars(ns).UpdateStatus(ctx, bar, metav1.UpdateOptions{})
	return err
}

// floorStatus is the status the controller writes for a new Bar.
func floorStatus(bar *barv1.Bar) barv1.BarStatus {
	return barv1.BarStatus{ObservedGeneration: bar.Generation, Conditions: []metav1.Condition{{
		Type: barv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ReplicasUnavailable",
		Message: "0 of 2 replicas available", ObservedGeneration: bar.Generation, LastTransitionTime: metav1.Now(),
	}}}
}

// createBars creates the Bars of a controller run, as fast as the floor does.
func createBars(ctx context.Context, bars clientset.Interface, ns string, n, inflight int) error {
	return parallel(ctx, n, inflight, func(ctx context.Context, i int) error {
		_, err := bars.BarcontrollerV1().Bars(ns).Create(ctx, benchBar(ns, i), metav1.CreateOptions{})
		return err
	})
}

// createUnrelated creates n Deployments no Bar asks for, spread over ten
// namespaces, as other workloads in a cluster would be.
func createUnrelated(ctx context.Context, kube kubernetes.Interface, n, inflight int) error {
	for j := range 10 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%d", j)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return parallel(ctx, n, inflight, func(ctx context.Context, i int) error {
		labels := map[string]string{"app": fmt.Sprintf("web-%d", i)}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%05d", i), Namespace: fmt.Sprintf("unrelated-%d", i%10), Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "web", Image: "registry.example/web:2.4",
						Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}},
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					}}},
				},
			},
		}
		_, err := kube.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{})
		return err
	})
}

// clean removes a scenario's Bars and Deployments: there is no garbage
// collector (no kube-controller-manager) to do it. One by one, many in
// flight: a delete collection deletes one object after another inside a
// single request, which the API server cuts at its request timeout (a
// minute) long before 50,000 Bars are gone.
func clean(ctx context.Context, kube kubernetes.Interface, bars clientset.Interface, ns string) error {
	barsIn, deploymentsIn := bars.BarcontrollerV1().Bars(ns), kube.AppsV1().Deployments(ns)
	if err := deleteEach(ctx, func(o metav1.ListOptions) (runtime.Object, error) { return barsIn.List(ctx, o) },
		func(ctx context.Context, name string) error { return barsIn.Delete(ctx, name, metav1.DeleteOptions{}) }); err != nil {
		return err
	}
	return deleteEach(ctx, func(o metav1.ListOptions) (runtime.Object, error) { return deploymentsIn.List(ctx, o) },
		func(ctx context.Context, name string) error {
			return deploymentsIn.Delete(ctx, name, metav1.DeleteOptions{})
		})
}

// deleteEach deletes what list names, a page at a time from the start
// (no continue token, which a compaction could expire), 64 in flight,
// until a page comes back empty; an object already gone is no error.
func deleteEach(ctx context.Context, list func(metav1.ListOptions) (runtime.Object, error), del func(context.Context, string) error) error {
	previous, attempts := "", 0
	for {
		page, err := list(metav1.ListOptions{Limit: 2000})
		if timedOut(err) && attempts < 10 {
			attempts++
			continue
		}
		if err != nil {
			return err
		}
		var names []string
		if err := meta.EachListItem(page, func(o runtime.Object) error {
			m, err := meta.Accessor(o)
			if err == nil {
				names = append(names, m.GetName())
			}
			return err
		}); err != nil || len(names) == 0 {
			return err
		}
		if names[0] == previous && attempts > 3 {
			return fmt.Errorf("%s is still there after its delete (a finalizer?)", previous)
		}
		if names[0] != previous {
			previous, attempts = names[0], 0
		}
		attempts++
		if err := parallel(ctx, len(names), 64, func(ctx context.Context, i int) error {
			// A delete the API server timed out is found by the next list.
			if err := del(ctx, names[i]); err != nil && !apierrors.IsNotFound(err) && !timedOut(err) {
				return err
			}
			return nil
		}); err != nil {
			return err
		}
	}
}

func timedOut(err error) bool { return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) }
