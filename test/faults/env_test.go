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

// Package faults breaks the real processes under bar-controller while it
// converges many Bars: the API server killed, etcd frozen, the controller
// itself killed again and again. Every case ends with the same checks:
// every Bar converged, one Deployment per Bar, no Deployment with two
// controllers, and the foreign Deployments untouched. make faults runs it
// and prints the table; make test runs it too.
package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

var (
	controllerBinary string
	crdDir           string

	resultsMu sync.Mutex
	results   []string
)

func TestMain(m *testing.M) {
	code := func() int {
		root, err := localcluster.ModuleRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		crdDir = filepath.Join(root, "artifacts", "crd")
		if os.Getenv(localcluster.BinDirEnv) != "" {
			dir, err := os.MkdirTemp("", "bar-faults-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			if controllerBinary, err = localcluster.BuildController(dir); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		code := m.Run()
		if len(results) > 0 {
			sort.Strings(results)
			fmt.Printf("\n| fault | result | time: from the first create to convergence, unless the fault says from or until what |\n| --- | --- | --- |\n%s\n", strings.Join(results, "\n"))
		}
		return code
	}()
	os.Exit(code)
}

// record adds a row to the table TestMain prints.
func record(t *testing.T, fault string, took time.Duration) {
	t.Cleanup(func() {
		res := "pass"
		if t.Failed() {
			res = "**FAIL**"
		}
		resultsMu.Lock()
		defer resultsMu.Unlock()
		results = append(results, fmt.Sprintf("| %s | %s | %v |", fault, res, took.Round(100*time.Millisecond)))
	})
}

// env is one control plane (etcd and kube-apiserver: faults on those are
// the point), a namespace with Bars, and foreign Deployments, one of
// which a Bar wants.
type env struct {
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	bars    clientset.Interface
	dir     string
	ns      string
	n       int
	// orphans counts Deployments whose Bars were deleted: without a
	// garbage collector (no kube-controller-manager here) they stay.
	orphans int
	foreign map[string]string // name -> resourceVersion when created
}

const foreignCount = 5

func newEnv(t *testing.T, n int) *env {
	t.Helper()
	return newEnvWith(t, n, localcluster.Options{CRDs: []string{crdDir}})
}

// newEnvWith starts the control plane with opts (Dir is set here): some
// faults need the Bar CRD left out (installCRDs adds it later), or the API
// server's own flags.
func newEnvWith(t *testing.T, n int, opts localcluster.Options) *env {
	t.Helper()
	localcluster.SkipWithoutBinaries(t)
	dir := t.TempDir()
	opts.Dir = dir
	c, err := localcluster.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS = -1
	e := &env{cluster: c, kube: kubernetes.NewForConfigOrDie(cfg), bars: clientset.NewForConfigOrDie(cfg), dir: dir, ns: "faults", n: n}
	ctx := t.Context()
	e.foreign = createNamespaceWithForeign(ctx, t, e.kube, e.ns)
	return e
}

// createNamespaceWithForeign creates namespace ns with foreignCount
// Deployments the controller does not own, and returns their
// resourceVersions by name: every case ends by checking that none moved.
func createNamespaceWithForeign(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign := map[string]string{}
	for i := range foreignCount {
		labels := map[string]string{"app": "foreign"}
		d, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("foreign-%d", i)},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/foreign:1"}}},
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		foreign[d.Name] = d.ResourceVersion
	}
	return foreign
}

// installCRDs installs the Bar CRD as localcluster.Start would have.
func (e *env) installCRDs(t *testing.T) {
	t.Helper()
	if _, err := e.cluster.Kubectl(t.Context(), "apply", "--server-side", "-f", crdDir); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cluster.Kubectl(t.Context(), "wait", "--for=condition=Established", "--timeout=60s", "-f", crdDir); err != nil {
		t.Fatal(err)
	}
}

// controller is one bar-controller process and where it serves.
type controller struct {
	*localcluster.Process
	metricsURL string // plain HTTP only with insecureMetrics
	readyzURL  string
}

// insecureMetrics serves /metrics over plain HTTP to anyone, so a case can
// read the controller's own counters without a scraper identity.
const insecureMetrics = "--metrics-secure=false"

// startController runs the controller binary with its default flags, as
// the admin, plus flags (later ones win, so they may override those).
func (e *env) startController(t *testing.T, name string, flags ...string) *controller {
	t.Helper()
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + e.cluster.Kubeconfig,
		"--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1]}, flags...)
	// With -race (make test), the race runtime sleeps 1 s before it exits
	// by default: the cases time exits, so the sleep is turned off.
	p, err := localcluster.StartProcess(name, controllerBinary, filepath.Join(e.dir, name+".log"),
		[]string{"GORACE=atexit_sleep_ms=0"}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return &controller{Process: p, metricsURL: "http://" + addrs[0] + "/metrics", readyzURL: "http://" + addrs[1] + "/readyz"}
}

// createBars creates the n Bars, and one more that wants foreign-0.
func (e *env) createBars(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				bar := &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bar-%05d", i)},
					Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: fmt.Sprintf("bar-%05d", i)}, Replicas: ptr.To[int32](1)}}
				// Faults make requests fail: retry, as any client would,
				// for at most 2 minutes (a hang bound: no fault here
				// lasts more than 10 s).
				err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
					_, err := e.bars.BarcontrollerV1().Bars(e.ns).Create(ctx, bar, metav1.CreateOptions{})
					return err == nil || strings.Contains(err.Error(), "already exists"), nil
				})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range e.n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if _, err := e.bars.BarcontrollerV1().Bars(e.ns).Create(ctx, &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "blocked"},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "foreign-0"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitConverged waits until every Bar's status is current and its
// Deployment exists (the blocked one: reports DeploymentNotOwned), then
// checks the invariants, and returns how long it took from since. The
// 5 minutes are a hang bound, not a performance claim: four times the
// longest wait seen (75 s, the competing writer's, counted from before
// its fight); the time is recorded, never judged here.
func (e *env) waitConverged(t *testing.T, since time.Time) time.Duration {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		bars, err := e.bars.BarcontrollerV1().Bars(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil // the fault may still be on
		}
		deps, err := e.kube.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		byName := map[string]*appsv1.Deployment{}
		for i := range deps.Items {
			byName[deps.Items[i].Name] = &deps.Items[i]
		}
		done := 0
		for i := range bars.Items {
			b := &bars.Items[i]
			d := byName[b.Spec.Deployment.Name]
			if b.Status.ObservedGeneration != b.Generation || d == nil {
				continue
			}
			if b.Name == "blocked" {
				if c := findReady(b); c != nil && c.Reason == barv1.ReasonDeploymentNotOwned {
					done++
				}
			} else if metav1.IsControlledBy(d, b) {
				done++
			}
		}
		last = fmt.Sprintf("%d of %d Bars converged", done, e.n+1)
		return done == e.n+1 && len(bars.Items) == e.n+1, nil
	})
	if err != nil {
		t.Fatalf("waiting for convergence: %v (%s)", err, last)
	}
	took := time.Since(since)
	e.checkInvariants(t)
	return took
}

func findReady(b *barv1.Bar) *metav1.Condition {
	for i := range b.Status.Conditions {
		if b.Status.Conditions[i].Type == barv1.ConditionReady {
			return &b.Status.Conditions[i]
		}
	}
	return nil
}

// checkInvariants: one Deployment per Bar, none with two controllers, the
// foreign ones exactly as they were created.
func (e *env) checkInvariants(t *testing.T) {
	t.Helper()
	deps, err := e.kube.AppsV1().Deployments(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perBar := map[string]int{}
	for _, d := range deps.Items {
		controllers := 0
		for _, r := range d.OwnerReferences {
			if ptr.Deref(r.Controller, false) {
				controllers++
				perBar[string(r.UID)]++
			}
		}
		if controllers > 1 {
			t.Errorf("Deployment %s has %d controllers", d.Name, controllers)
		}
		if rv, ok := e.foreign[d.Name]; ok && d.ResourceVersion != rv {
			t.Errorf("foreign Deployment %s changed: resourceVersion %s, was %s", d.Name, d.ResourceVersion, rv)
		}
	}
	if len(deps.Items) != e.n+e.orphans+foreignCount {
		t.Errorf("%d Deployments, want %d (one per Bar) + %d orphaned + %d foreign", len(deps.Items), e.n, e.orphans, foreignCount)
	}
	for uid, k := range perBar {
		if k != 1 {
			t.Errorf("Bar %s controls %d Deployments", uid, k)
		}
	}
}
