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
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// row is what every kind of row measures on: a control plane of its own,
// the controller's identity on it, the bench's own writers, warmed up.
type row struct {
	c          *localcluster.Cluster
	w          writers
	kubeconfig string // the controller's
	dir        string
	close      func()
}

// newRow starts a row's control plane, named label in the log directory
// (its monitor's table and the components' logs), with apiFlags added to
// kube-apiserver's. The caller closes it; newRow cleans up after itself
// when it fails.
func (s *scenario) newRow(ctx context.Context, label string, apiFlags []string) (_ *row, err error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	dir, err := os.MkdirTemp("", "bar-bench-")
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return nil, err
	}
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: s.binDir, Dir: dir, CRDs: []string{s.crdDir}, APIServerFlags: apiFlags})
	if err != nil {
		return nil, err
	}
	undo = append(undo, c.Stop)
	mon, err := startMonitor(c, filepath.Join(s.logDir, "cluster-"+label+".tsv"))
	if err != nil {
		return nil, err
	}
	s.step = mon.step
	undo = append(undo, func() {
		mon.close()
		if err := keepLogs(c, filepath.Join(s.logDir, "cluster-"+label)); err != nil {
			fmt.Fprintln(os.Stderr, "bench: keeping the control plane's logs:", err)
		}
	})
	// The controller runs as it does in a cluster: the shipped
	// ServiceAccount and RBAC, in API Priority and Fairness's workload-low
	// level, which its default --kube-api-qps=-1 relies on as its only
	// limit. The admin (system:masters) would be exempt from APF.
	kubeconfig := filepath.Join(dir, "controller.kubeconfig")
	if _, err := c.InstallServiceAccount(ctx, root, kubeconfig, 3*time.Hour); err != nil {
		return nil, fmt.Errorf("the controller's ServiceAccount: %w", err)
	}
	// The bench's own client is never the bottleneck: no client-side limit.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	return &row{c: c, kubeconfig: kubeconfig, dir: dir, close: cleanup,
		w: writers{kube: kubernetes.NewForConfigOrDie(cfg), bars: clientset.NewForConfigOrDie(cfg)}}, nil
}

// warmUpBars is how many Bars each part of the warm-up makes.
const warmUpBars = 300

// warmUp readies a fresh control plane before anything is timed. First
// 300 Bars as a floor makes them, then removed: the API server's caches,
// connections and the CRD's handlers. Then, with controllers, one cold
// start of each controller the row measures (bar-controller's, and the
// peer's if it has one) over 300 Bars of its own, unmeasured, then
// removed. A fresh API server does some work once for a controller's
// path that no floor's path asks of it (a ServiceAccount token and its
// RBAC, the workload-low priority level, the status apply's field sets,
// Events, watches), we think: without this the row's first controller run
// was the slowest of its row in five rows of six at 5,000 Bars, by 1.4 to
// 4.3 s of 22 to 31 (docs/measurements/benchmarks-performance-users-feel.md).
func (s scenario) warmUp(ctx context.Context, r *row, controllers bool) error {
	if err := reuseNamespace(ctx, r.w.kube, "warmup"); err != nil {
		return err
	}
	s.step("warm-up")
	if _, err := runFloor(ctx, r.w, "warmup", warmUpBars, s.inflight); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := clean(ctx, r.w.kube, r.w.bars, "warmup"); err != nil {
		return err
	}
	if !controllers {
		return nil
	}
	each := []scenario{s}
	if s.peer != "" {
		if err := grantPeer(ctx, r.w.kube); err != nil {
			return fmt.Errorf("the peer's grant: %w", err)
		}
		each = append(each, s.peerScenario())
	}
	for _, ws := range each {
		ws.warm, ws.coldOnly, ws.samplePeak, ws.rounds, ws.cpuProfile = true, true, false, 1, 0
		scratch := result{N: warmUpBars}
		if err := ws.controllerRun(ctx, r.c, r.w, r.kubeconfig, &scratch, 0); err != nil {
			return fmt.Errorf("warm-up, %s: %w", ws.runName(0), err)
		}
	}
	return nil
}

// reuseNamespace creates a namespace or takes the one there: a second
// warm-up in a row (after a steady step) finds the first's namespaces,
// emptied (clean removes what is in them, not them).
func reuseNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	if err := createNamespace(ctx, kube, name); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
