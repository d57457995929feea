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

// Package node runs bar-controller in-cluster for real: its image, built
// from this tree with no Docker engine (internal/image), imported into a
// real node (harness/realnode: containerd, runc, a kubelet built from
// source), installed with kubectl apply -k artifacts/ as users do. The
// kubelet probes it, restarts it, sends it SIGTERM; Bars get Pods whose
// containers really run.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/harness/realnode"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

const (
	// controllerRef is the controller's image as the node knows it; the
	// test's kustomization points artifacts/ at it (see install).
	controllerRef = "bar-controller:node-test"
	// appRef is what the Bars run (test/images/app).
	appRef = "bar-realnode/app:test"
	// installNamespace is where artifacts/install puts the controller.
	installNamespace = "bar-controller"
)

type env struct {
	cluster *localcluster.Cluster
	node    *realnode.Node
	kube    kubernetes.Interface
	bars    clientset.Interface
	dir     string
	watch   *watcher
}

// shared is the one cluster and node of this package, started by TestMain;
// nil when the machine cannot run a node (then every test skips or fails,
// see requireNode).
var (
	shared     *env
	missing    []string
	artifacts  string
	setupError error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	artifacts = filepath.Join(root, "artifacts")
	if os.Getenv(localcluster.BinDirEnv) == "" {
		missing = []string{"$" + localcluster.BinDirEnv + " (run make test)"}
		return m.Run()
	}
	if missing = realnode.Missing(""); len(missing) > 0 {
		return m.Run()
	}
	if err := realnode.CleanUp(); err != nil {
		fmt.Fprintf(os.Stderr, "cleaning up after an earlier run: %v\n", err)
		return 1
	}
	before, err := realnode.Snapshot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared, setupError = start()
	code := m.Run()
	if shared != nil {
		code = max(code, shared.stop(code))
	}
	// The node must leave the host as it found it.
	after, err := realnode.Snapshot()
	if err != nil || after != before {
		fmt.Fprintf(os.Stderr, "the host changed across the node tests (%v)\nbefore: %s\nafter: %s\n", err, before, after)
		return 1
	}
	return code
}

func start() (*env, error) {
	dir, err := os.MkdirTemp("", "bar-node-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir}
	ctx := context.Background()
	e.cluster, err = localcluster.Start(ctx, localcluster.Options{
		Dir: dir, ControllerManager: true, Scheduler: true,
		APIServerFlags: realnode.APIServerFlags,
	})
	if err != nil {
		return e, err
	}
	e.kube = kubernetes.NewForConfigOrDie(e.cluster.Config)
	e.bars = clientset.NewForConfigOrDie(e.cluster.Config)
	// 10.0.0.1: the first address of the test API server's
	// --service-cluster-ip-range, the "kubernetes" Service.
	e.node, err = realnode.Start(ctx, realnode.Options{Cluster: e.cluster, Subnet: "10.88.77.0/24", ServiceIP: "10.0.0.1", WorkDir: dir})
	if err != nil {
		return e, err
	}
	e.watch = startWatcher(e)
	var archives []string
	for _, img := range []realnode.Image{
		{Package: ".", Ref: controllerRef, LDFlags: "-X github.com/barcontroller/bar-controller/internal/version.version=node-test"},
		{Package: "./test/images/app", Ref: appRef, User: "65532:65532"},
	} {
		a, err := realnode.BuildArchive(dir, img)
		if err != nil {
			return e, err
		}
		archives = append(archives, a)
	}
	return e, e.node.Import(ctx, archives...)
}

// stop stops the node and the control plane. The directory with their
// logs is kept when a test failed or a controller Pod stalled (the
// failure messages and the stalls name files in it), or on request.
func (e *env) stop(testsCode int) int {
	code := 0
	var stalls []stall
	if e.watch != nil {
		e.watch.stop()
		stalls = e.watch.during(time.Time{}, time.Now())
	}
	for _, s := range stalls {
		fmt.Fprintf(os.Stderr, "stall: %s\n", &s)
	}
	if e.node != nil {
		if err := e.node.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the node: %v\n", err)
			code = 1
		}
	}
	if e.cluster != nil {
		e.cluster.Stop()
	}
	if os.Getenv("BAR_KEEP_TEST_DIR") == "" && testsCode == 0 && len(stalls) == 0 {
		os.RemoveAll(e.dir)
	} else {
		fmt.Fprintf(os.Stderr, "node test logs kept in %s\n", e.dir)
	}
	return code
}

// RequireNodeEnv makes a machine that cannot run a node a failure instead
// of a skip: make test sets it when run as root (who can install what is
// missing), and CI always, so that CI cannot pass by skipping these tests.
const RequireNodeEnv = "BAR_REQUIRE_NODE"

// requireNode returns the shared environment, or skips the test with what
// this machine lacks, or fails it where a node is required.
func requireNode(t *testing.T) *env {
	t.Helper()
	if len(missing) > 0 {
		msg := "a real node needs: " + strings.Join(missing, "; ")
		if os.Getenv(RequireNodeEnv) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if setupError != nil {
		t.Fatalf("starting the control plane and node: %v", setupError)
	}
	start := time.Now()
	t.Cleanup(func() { shared.afterTest(t, start) })
	return shared
}
