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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barac "github.com/barcontroller/bar-controller/pkg/generated/applyconfiguration/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// The controller run costs the API server more CPU than the floor for the
// same Bars. --breakdown says which difference costs what: on one control
// plane it runs the floor and variants of it that each add one thing the
// controller does, in rounds, and reports the server CPU of each. No
// controller runs, so its own CPU does not compete with the server's.

// variant is one way of making, per Bar, what a converged Bar needs.
type watchSet int

const (
	noWatches watchSet = iota
	controllerWatches
	benchWatches
)

type variant struct {
	name string
	// watches are open during the run: the controller's three, or the
	// bench's two that observe convergence.
	watches watchSet
	write   func(ctx context.Context, w writers, ns string, i int) error
}

var variants = []variant{
	{name: "floor: create Bar, create Deployment, update status", write: floorWrites},
	{name: "floor + one Event per Bar", write: func(ctx context.Context, w writers, ns string, i int) error {
		if err := floorWrites(ctx, w, ns, i); err != nil {
			return err
		}
		return createEvent(ctx, w.kube, ns, fmt.Sprintf("bar-%05d", i))
	}},
	{name: "floor with the status as a server-side apply", write: applyStatusWrites},
	{name: "floor with the controller's three watches open", watches: controllerWatches, write: floorWrites},
	{name: "floor with the bench's two convergence watches open", watches: benchWatches, write: floorWrites},
	{name: "status apply, Event and the controller's watches: its requests, without its CPU", watches: controllerWatches, write: func(ctx context.Context, w writers, ns string, i int) error {
		if err := applyStatusWrites(ctx, w, ns, i); err != nil {
			return err
		}
		return createEvent(ctx, w.kube, ns, fmt.Sprintf("bar-%05d", i))
	}},
}

// applyStatusWrites makes the same objects as floorWrites, with the
// requests the controller sends (sync.go): a plain create of the
// Deployment, and a forced apply of the status as field manager
// bar-controller instead of an update.
func applyStatusWrites(ctx context.Context, w writers, ns string, i int) error {
	bar, err := w.bars.BarcontrollerV1().Bars(ns).Create(ctx, benchBar(ns, i), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if _, err := w.kube.AppsV1().Deployments(ns).Create(ctx, floorDeployment(bar), metav1.CreateOptions{FieldManager: "bar-controller"}); err != nil {
		return err
	}
	s := floorStatus(bar)
	c := s.Conditions[0]
	status := barac.Bar(bar.Name, ns).WithStatus(barac.BarStatus().
		WithObservedGeneration(s.ObservedGeneration).
		WithAvailableReplicas(0).
		WithConditions(metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
			WithMessage(c.Message).WithObservedGeneration(c.ObservedGeneration).WithLastTransitionTime(c.LastTransitionTime)))
	_, err = w.bars.BarcontrollerV1().Bars(ns).ApplyStatus(ctx, status, metav1.ApplyOptions{FieldManager: "bar-controller", Force: true})
	return err
}

// createEvent writes the Event the controller writes when it creates a
// Deployment, as tools/events would build it.
func createEvent(ctx context.Context, kube kubernetes.Interface, ns, bar string) error {
	now := time.Now()
	_, err := kube.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", bar, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: "bar-controller",
		ReportingInstance:   "bar-controller-bench",
		Action:              "Create",
		Reason:              "DeploymentCreated",
		Regarding:           corev1.ObjectReference{APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar", Namespace: ns, Name: bar},
		Note:                "Created Deployment " + bar,
		Type:                corev1.EventTypeNormal,
	}, metav1.CreateOptions{})
	return err
}

// openWatches opens, and drains until ctx ends, what the controller's
// informers watch (main.go): all Bars (JSON), Deployments with the
// managed-by label (protobuf) and the metadata of all others (protobuf); or
// what the bench's convergence watcher does (scenario.go): Bars and
// Deployments in one namespace.
func openWatches(ctx context.Context, cfg *rest.Config, set watchSet, ns string) error {
	kubeCfg := rest.CopyConfig(cfg)
	kubeCfg.ContentType = runtime.ContentTypeProtobuf
	kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube := kubernetes.NewForConfigOrDie(kubeCfg)
	meta := metadata.NewForConfigOrDie(kubeCfg)
	bars := clientset.NewForConfigOrDie(cfg)
	opts := metav1.ListOptions{AllowWatchBookmarks: true}
	managed, others := opts, opts
	managed.LabelSelector = "app.kubernetes.io/managed-by=bar-controller"
	others.LabelSelector = "app.kubernetes.io/managed-by!=bar-controller"
	opens := []func() (watch.Interface, error){
		func() (watch.Interface, error) { return bars.BarcontrollerV1().Bars("").Watch(ctx, opts) },
		func() (watch.Interface, error) { return kube.AppsV1().Deployments("").Watch(ctx, managed) },
		func() (watch.Interface, error) {
			return meta.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")).Watch(ctx, others)
		},
	}
	if set == benchWatches {
		opens = []func() (watch.Interface, error){
			func() (watch.Interface, error) { return bars.BarcontrollerV1().Bars(ns).Watch(ctx, opts) },
			func() (watch.Interface, error) { return kube.AppsV1().Deployments(ns).Watch(ctx, opts) },
		}
	}
	var ws []watch.Interface
	for _, open := range opens {
		w, err := open()
		if err != nil {
			for _, w := range ws {
				w.Stop()
			}
			return err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		go func() {
			for range w.ResultChan() {
			}
		}()
		go func() { <-ctx.Done(); w.Stop() }()
	}
	return nil
}

// breakdown runs every variant rounds times, interleaved, with n Bars each,
// and prints a table of the API server's and etcd's CPU per variant.
func breakdown(ctx context.Context, s scenario, n, rounds int) (string, error) {
	dir, err := os.MkdirTemp("", "bar-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: s.binDir, Dir: dir, CRDs: []string{s.crdDir}})
	if err != nil {
		return "", err
	}
	defer c.Stop()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	w := writers{kube: kubernetes.NewForConfigOrDie(cfg), bars: clientset.NewForConfigOrDie(cfg)}
	if _, err := w.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "breakdown"}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	runOnce := func(v variant, count int) (time.Duration, error) {
		vctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if v.watches != noWatches {
			if err := openWatches(vctx, c.Config, v.watches, "breakdown"); err != nil {
				return 0, err
			}
		}
		cpu0, err := serverCPU(c)
		if err != nil {
			return 0, err
		}
		if err := parallel(vctx, count, s.inflight, func(ctx context.Context, i int) error { return v.write(ctx, w, "breakdown", i) }); err != nil {
			return 0, fmt.Errorf("%s: %w", v.name, err)
		}
		cpu1, err := serverCPU(c)
		if err != nil {
			return 0, err
		}
		cancel()
		if err := clean(ctx, w.kube, w.bars, "breakdown"); err != nil {
			return 0, err
		}
		return cpu1 - cpu0, w.kube.EventsV1().Events("breakdown").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	for _, v := range variants { // warm-up: every code path once
		if _, err := runOnce(v, 300); err != nil {
			return "", fmt.Errorf("warm-up: %w", err)
		}
	}
	cpu := make([][]time.Duration, len(variants))
	for r := range rounds {
		for i, v := range variants {
			d, err := runOnce(v, n)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(os.Stderr, "bench: breakdown round %d: %s: %.1f s\n", r+1, v.name, d.Seconds())
			cpu[i] = append(cpu[i], d)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %d Bars, %d requests in flight, no controller | API server + etcd CPU, each round | mean ÷ floor |\n| --- | --- | ---: |\n", n, s.inflight)
	mean := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum.Seconds() / float64(len(ds))
	}
	for i, v := range variants {
		each := make([]string, len(cpu[i]))
		for j, d := range cpu[i] {
			each[j] = fmt.Sprintf("%.1f s", d.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f× |\n", v.name, strings.Join(each, ", "), mean(cpu[i])/mean(cpu[0]))
	}
	return b.String(), nil
}
