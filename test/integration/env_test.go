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

// Package integration tests bar-controller's behaviour against a real
// control plane: etcd, kube-apiserver (with OwnerReferencesPermissionEnforcement
// and an audit log), kube-controller-manager (the Deployment and ReplicaSet
// controllers, the garbage collector), kube-scheduler and kwok playing the
// kubelet of one node. The controller is the binary built from this
// repository, running as its own process under the shipped RBAC.
package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// Every test works in a namespace of its own on one shared control plane
// and controller, started on first use (running only the unit tests costs
// nothing) and stopped by TestMain.

// The controller's identity: the ServiceAccount artifacts/install creates,
// with the ClusterRole it ships. The audit log tells its writes apart from
// the tests' own by this name.
const controllerUser = localcluster.ControllerUser

// testResync is short so that resyncs happen inside the windows in which
// the tests count writes.
const testResync = time.Second

// traceTestBars makes the controller log every step for the tests' Bars
// (setupIntegration's namespaces), which syncs counts per Bar.
const traceTestBars = "bar-it-*/*"

type integrationEnv struct {
	cluster    *localcluster.Cluster
	kube       kubernetes.Interface // admin, for the tests themselves
	bars       clientset.Interface
	controller *localcluster.Process
	metricsURL string
	stop       func()
	// restart stops the controller and starts it again, as a rollout or a
	// crash would (restartController).
	restart func() error
}

var (
	envOnce   sync.Once
	sharedEnv *integrationEnv
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEnv != nil {
		sharedEnv.stop()
	}
	os.Exit(code)
}

// setupIntegration returns the shared environment and a fresh namespace.
func setupIntegration(t *testing.T) (*integrationEnv, string) {
	t.Helper()
	localcluster.SkipWithoutBinaries(t)
	envOnce.Do(func() { sharedEnv, envErr = startIntegrationEnv() })
	if envErr != nil {
		t.Fatalf("starting the control plane: %v", envErr)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bar-it-"}}
	ns, err := sharedEnv.kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sharedEnv, ns.Name
}

func startIntegrationEnv() (_ *integrationEnv, err error) {
	ctx := context.Background()
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bar-integration-")
	if err != nil {
		return nil, err
	}
	env := &integrationEnv{}
	env.stop = func() {
		if env.controller != nil {
			env.controller.Stop(40 * time.Second)
			// Every run's log: a test may have restarted the controller.
			logs, _ := filepath.Glob(filepath.Join(dir, "logs", "bar-controller-*.log"))
			for _, log := range logs {
				if data, _ := os.ReadFile(log); strings.Contains(string(data), "WARNING: DATA RACE") {
					fmt.Fprintf(os.Stderr, "bar-controller reported a data race, see %s\n", log)
					os.Setenv("BAR_KEEP_TEST_DIR", "1")
				}
			}
		}
		if env.cluster != nil {
			env.cluster.Stop()
		}
		if os.Getenv("BAR_KEEP_TEST_DIR") == "" {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "control-plane and controller logs kept in %s\n", dir)
		}
	}
	defer func() {
		if err != nil {
			env.stop()
		}
	}()

	binary, err := localcluster.BuildController(dir)
	if err != nil {
		return nil, err
	}
	stages, err := localcluster.KwokStages(root)
	if err != nil {
		return nil, err
	}
	env.cluster, err = localcluster.Start(ctx, localcluster.Options{
		Dir: dir, ControllerManager: true, Scheduler: true, KwokStages: stages, AuditLog: true,
		CRDs: []string{filepath.Join(root, "artifacts", "crd")},
	})
	if err != nil {
		return nil, err
	}
	env.kube = kubernetes.NewForConfigOrDie(env.cluster.Config)
	env.bars = clientset.NewForConfigOrDie(env.cluster.Config)
	if err := env.cluster.AddNode(ctx, "kwok-node-0"); err != nil {
		return nil, err
	}

	// The shipped namespace, ServiceAccount and RBAC, not the Deployment:
	// the controller runs here as a process, with that identity.
	kubeconfig := filepath.Join(dir, "controller.kubeconfig")
	if _, err := env.cluster.InstallServiceAccount(ctx, root, kubeconfig, 3*time.Hour); err != nil {
		return nil, err
	}

	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	env.metricsURL = "http://" + addrs[0] + "/metrics"
	starts := 0
	start := func() error {
		starts++
		log := filepath.Join(dir, "logs", fmt.Sprintf("bar-controller-%d.log", starts))
		p, err := localcluster.StartProcess("bar-controller", binary, log,
			append(os.Environ(), "GORACE=atexit_sleep_ms=0"),
			"--kubeconfig="+kubeconfig, "-v=2", "--resync-period="+testResync.String(), "--trace="+traceTestBars,
			"--metrics-bind-address="+addrs[0], "--metrics-secure=false", "--health-probe-bind-address="+addrs[1])
		if err != nil {
			return err
		}
		env.controller = p
		return waitReady(ctx, p, "http://"+addrs[1]+"/readyz")
	}
	env.restart = func() error {
		env.controller.Stop(40 * time.Second)
		return start()
	}
	if err := start(); err != nil {
		return nil, err
	}
	return env, nil
}

// waitReady waits for the controller's caches to sync, or for it to exit.
// The minute bounds a hang; it claims nothing about speed.
func waitReady(ctx context.Context, p *localcluster.Process, url string) error {
	deadline := time.After(time.Minute)
	for {
		if resp, err := http.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("bar-controller exited (%v):%s", p.State(), p.LogTail(30))
		case <-deadline:
			return fmt.Errorf("bar-controller not ready after a minute:%s", p.LogTail(30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writes returns what the controller has written in ns so far, from the
// API server's audit log.
func (e *integrationEnv) writes(t *testing.T, ns string) []string {
	t.Helper()
	events, err := e.cluster.Writes(controllerUser, ns)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.String()
	}
	return out
}

// syncs is how many syncs of the Bar ns/name the controller has finished
// so far, whatever their result, by its --trace log lines ("Sync done",
// trace.go). The tests run in parallel on one controller, so only the
// Bar's own syncs show that a window in which it wrote nothing was one in
// which it looked: bar_controller_syncs_total counts every test's Bars.
func (e *integrationEnv) syncs(t *testing.T, ns, name string) int {
	t.Helper()
	data, err := os.ReadFile(e.controller.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	bar := fmt.Sprintf("bar=%q", ns+"/"+name)
	n := 0
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, `"Sync done"`) && strings.Contains(line, bar) {
			n++
		}
	}
	return n
}

// writesOverSyncs waits until the controller has finished n whole syncs
// of the Bar ns/name, and returns what it wrote in ns meanwhile. A window
// counted in the Bar's own syncs, not in seconds, proves the same on a
// slow machine as on a fast one: each of those syncs looked, and none
// wrote. Syncs of one key never overlap (the work queue), so one sync may
// be under way as the window opens: n+1 must finish. The minute that
// eventually allows only bounds a hang (with testResync at 1 s, n syncs
// take about n seconds).
func (e *integrationEnv) writesOverSyncs(t *testing.T, ns, name string, n int) []string {
	t.Helper()
	before, syncs := len(e.writes(t, ns)), e.syncs(t, ns, name)
	eventually(t, fmt.Sprintf("%d more syncs of Bar %s/%s", n+1, ns, name), func(context.Context) (bool, error) {
		return e.syncs(t, ns, name) >= syncs+n+1, nil
	})
	return e.writes(t, ns)[before:]
}

// eventually polls cond until it holds; its minute (localcluster.Eventually)
// bounds a hang, and is no claim about speed: what the tests wait for
// takes seconds.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	localcluster.Eventually(t, what, cond)
}
