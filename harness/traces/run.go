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

// Package traces reruns the scenarios whose output the docs show, on a
// local control plane, and compares or rewrites the captures there (the
// Documents): the controller's --trace log in docs/informer-traces.md, and
// in docs/exercises.md the exercises' own, with what the commands an
// exercise tells the learner to run print. "make traces" (hack/traces)
// rewrites them; test/traces fails when the committed ones no longer match
// what the code prints.
package traces

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// The Bar the scenarios follow, as the docs name it: make run applies
// artifacts/examples/example-bar.yaml, and the exercises trace it.
const (
	namespace = "default"
	barName   = "example"
	traceFlag = "--trace=" + namespace + "/" + barName
)

// Options say where the binaries are and where to work.
type Options struct {
	// BinDir holds etcd, kube-apiserver, ... and kwok; empty means $KUBE_BIN_DIR.
	BinDir string
	// Controller is the bar-controller binary to run.
	Controller string
	// Root is the repository root (artifacts/, hack/tools).
	Root string
	// Dir receives the control plane's data and every log; it must exist.
	Dir string
	// Env is added to the controller's environment (GORACE under -race).
	Env []string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

// Captures holds, per capture name, its lines as the docs show them: the
// controller's log lines for a scenario (Select), klog text with its
// timestamps, or what a command printed (kinds.go).
type Captures map[string][]string

// Run starts a control plane, runs the scenarios in the order the docs
// tell them, and returns their captures. Each scenario waits for the Bar
// to converge and the controller's log to go quiet, so a capture ends
// where the story does rather than at a fixed time.
func Run(ctx context.Context, opts Options) (Captures, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stages, err := localcluster.KwokStages(opts.Root)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		BinDir: opts.BinDir, Dir: opts.Dir, ControllerManager: true, Scheduler: true, KwokStages: stages,
		CRDs: []string{filepath.Join(opts.Root, "artifacts", "crd")},
	})
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	defer cluster.Stop()
	if err := cluster.AddNode(ctx, "kwok-node-0"); err != nil {
		return nil, err
	}
	logf("control plane up after %s", time.Since(start).Round(time.Second))

	s := &scenarios{opts: opts, cluster: cluster, logf: logf, out: Captures{},
		kube: kubernetes.NewForConfigOrDie(cluster.Config), bars: clientset.NewForConfigOrDie(cluster.Config)}
	defer s.stop()
	// One chain on one control plane, in the order the exercises run
	// them: each scenario starts from the state the one before left, as a
	// learner's does (the restart finds example-web, the foreign
	// Deployment takes the name of a Bar at 3 replicas).
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"create", s.create},
		{"delete", s.deleteDeployment},
		{"scale", s.scale},
		{"rename", s.rename},
		{"restart", s.restart},
		{"restart-v6", s.restartV6},
		{"foreign", s.foreign},
		{"foreign-delete", s.foreignDelete},
		{"metrics", s.scrapeMetrics},
	} {
		t := time.Now()
		if err := step.run(ctx); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", step.name, err)
		}
		logf("scenario %s: %d lines captured in %s", step.name, len(s.out[step.name]), time.Since(t).Round(100*time.Millisecond))
	}
	return s.out, nil
}

type scenarios struct {
	opts    Options
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	bars    clientset.Interface
	logf    func(string, ...any)

	proc        *localcluster.Process
	metricsAddr string // the running controller's metrics address
	runs        int
	out         Captures
}

// startController runs bar-controller as make run does (--v=2 and the
// --trace of exercises.md), out of cluster with the admin kubeconfig, and
// waits for its caches to sync. The conversion webhook make run also
// serves is left out: nothing here reads v1alpha1, and its lines are not
// part of any capture.
func (s *scenarios) startController(ctx context.Context, verbosity int) error {
	s.runs++
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		return err
	}
	log := filepath.Join(s.opts.Dir, "logs", fmt.Sprintf("bar-controller.%d.log", s.runs))
	p, err := localcluster.StartProcess("bar-controller", s.opts.Controller, log, s.opts.Env,
		"--kubeconfig="+s.cluster.Kubeconfig, fmt.Sprintf("--v=%d", verbosity), traceFlag,
		"--metrics-bind-address="+addrs[0], "--metrics-secure=false", "--health-probe-bind-address="+addrs[1])
	if err != nil {
		return err
	}
	s.proc, s.metricsAddr = p, addrs[0]
	readyz := "http://" + addrs[1] + "/readyz"
	return p.WaitReady(ctx, time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", readyz, resp.Status)
		}
		return nil
	})
}

// stop stops the controller as Enter in make run does: SIGTERM, and the
// syncs in progress finish (each gets up to 30 s).
func (s *scenarios) stop() {
	if s.proc != nil {
		s.proc.Stop(40 * time.Second)
		s.proc = nil
	}
}

// create: a controller whose caches synced on a cluster with no Bars, then
// the example Bar, until the Deployment is rolled out and the Bar says so.
func (s *scenarios) create(ctx context.Context) error {
	if err := s.startController(ctx, 2); err != nil {
		return err
	}
	if _, err := s.cluster.Kubectl(ctx, "apply", "-f", filepath.Join(s.opts.Root, "artifacts", "examples", "example-bar.yaml")); err != nil {
		return err
	}
	return s.settle(ctx, "create", 0, "example-nginx", 2, "")
}

// scale: someone scales the Deployment the controller owns; the controller
// puts spec.replicas back, and kube-controller-manager scales down again.
func (s *scenarios) scale(ctx context.Context) error {
	from := s.logSize()
	if _, err := s.cluster.Kubectl(ctx, "scale", "deployment", "example-nginx", "--replicas=5"); err != nil {
		return err
	}
	return s.settle(ctx, "scale", from, "example-nginx", 2, "")
}

// rename: spec.deployment.name changes; the new Deployment is created, the
// old one deleted once the new one is available.
func (s *scenarios) rename(ctx context.Context) error {
	from := s.logSize()
	if _, err := s.cluster.Kubectl(ctx, "patch", "bar", barName, "--type=merge", "-p", `{"spec":{"deployment":{"name":"example-web"}}}`); err != nil {
		return err
	}
	return s.settle(ctx, "rename", from, "example-web", 2, "example-nginx")
}

// restart: the controller stops, the Bar is scaled while nobody watches,
// and a new controller relists.
func (s *scenarios) restart(ctx context.Context) error {
	s.stop()
	if _, err := s.cluster.Kubectl(ctx, "scale", "bar", barName, "--replicas=3"); err != nil {
		return err
	}
	if err := s.startController(ctx, 2); err != nil {
		return err
	}
	return s.settle(ctx, "restart", 0, "example-web", 3, "")
}

// restartV6: the same relist at -v=6, where client-go logs the requests:
// the WatchList watches and their bookmarks. Nothing changed meanwhile.
func (s *scenarios) restartV6(ctx context.Context) error {
	s.stop()
	if err := s.startController(ctx, 6); err != nil {
		return err
	}
	return s.settle(ctx, "restart-v6", 0, "example-web", 3, "")
}

func (s *scenarios) logSize() int64 {
	info, err := os.Stat(s.proc.LogPath)
	if err != nil {
		return 0
	}
	return info.Size()
}

// quiet is how long the controller's log must not grow before a capture
// ends. Two seconds is far longer than any gap inside a story here (syncs
// take milliseconds, kwok's Pod stages are immediate), and the controller
// logs nothing periodic at these levels within the 10-minute resync period.
const quiet = 2 * time.Second

// settle waits until the Bar reports replicas available for Deployment
// deployment (and gone is gone, if set), then records the controller's log
// after offset from as capture name (logged).
func (s *scenarios) settle(ctx context.Context, name string, from int64, deployment string, replicas int32, gone string) error {
	if err := s.waitFor(ctx, func(ctx context.Context) error { return s.converged(ctx, deployment, replicas, gone) }); err != nil {
		return err
	}
	return s.logged(ctx, name, from)
}

// waitFor polls cond until it is nil, for up to 90 s, and fails early if
// the controller exits.
func (s *scenarios) waitFor(ctx context.Context, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		last := cond(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not converged: %v%s", last, s.proc.LogTail(30))
		case <-s.proc.Exited():
			return fmt.Errorf("bar-controller exited (%v)%s", s.proc.State(), s.proc.LogTail(30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logged waits until the controller's log has been quiet for a while, and
// records its lines after offset from, as the docs show them (Select), as
// capture name.
func (s *scenarios) logged(ctx context.Context, name string, from int64) error {
	size, err := s.quietLog(ctx)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(s.proc.LogPath)
	if err != nil {
		return err
	}
	s.out[name] = Select(strings.Split(strings.TrimRight(string(data[from:size]), "\n"), "\n"))
	return nil
}

// quietLog waits until the controller's log has not grown for quiet, and
// returns its size then.
func (s *scenarios) quietLog(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	size, since := s.logSize(), time.Now()
	for time.Since(since) < quiet {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the controller's log never went quiet for %s%s", quiet, s.proc.LogTail(30))
		case <-time.After(100 * time.Millisecond):
		}
		if n := s.logSize(); n != size {
			size, since = n, time.Now()
		}
	}
	return size, nil
}

// converged is nil once the Bar's status describes its spec with every
// replica available, its Deployment and that Deployment's ReplicaSets have
// finished scaling, and the Deployment named gone no longer exists.
func (s *scenarios) converged(ctx context.Context, deployment string, replicas int32, gone string) error {
	bar, err := s.bars.BarcontrollerV1().Bars(namespace).Get(ctx, barName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, c := range bar.Status.Conditions {
		ready = ready || (c.Type == "Ready" && c.Status == metav1.ConditionTrue)
	}
	if !ready || bar.Status.ObservedGeneration != bar.Generation || bar.Status.AvailableReplicas != replicas {
		return fmt.Errorf("Bar: ready=%v observedGeneration=%d/%d available=%d/%d",
			ready, bar.Status.ObservedGeneration, bar.Generation, bar.Status.AvailableReplicas, replicas)
	}
	d, err := s.kube.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	// spec.replicas too: right after the scale, the Deployment asks for 5
	// while its status still counts the 2 it had.
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas || d.Status.ObservedGeneration != d.Generation ||
		d.Status.Replicas != replicas || d.Status.AvailableReplicas != replicas {
		return fmt.Errorf("Deployment %s: spec.replicas=%v observedGeneration=%d/%d replicas=%d available=%d, want %d",
			deployment, d.Spec.Replicas, d.Status.ObservedGeneration, d.Generation, d.Status.Replicas, d.Status.AvailableReplicas, replicas)
	}
	if gone != "" {
		_, err := s.kube.AppsV1().Deployments(namespace).Get(ctx, gone, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("Deployment %s still exists", gone)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
