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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/barcontroller/bar-controller/internal/testcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
)

// The integration tests share one real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok with one simulated node) and
// one bar-controller running in this process through its real Run loop.
// Each test works in a namespace of its own. It is started on first use, so
// running only the unit tests costs nothing, and stopped by TestMain.

// requireIntegrationEnv makes a missing control plane a failure instead of a
// skip; make test sets it so CI can never pass by skipping.
const requireIntegrationEnv = "BAR_REQUIRE_INTEGRATION"

// testResync is short so that resyncs happen inside the windows in which
// the tests count writes.
const testResync = time.Second

type integrationEnv struct {
	cluster    *testcluster.Cluster
	kube       kubernetes.Interface // admin, for the tests themselves
	bars       clientset.Interface
	controller *Controller
	writes     *writeCounter // what the controller sent, by namespace
	stop       func()
}

var (
	envOnce   sync.Once
	sharedEnv *integrationEnv
	envErr    error
)

func TestMain(m *testing.M) {
	// The ops tests (ops_env_test.go) run this binary as the real
	// bar-controller. The testing flags are registered but not parsed yet,
	// and their names (test.*) do not clash with klog's or ours, so main()
	// parses the controller's command line as the real binary would.
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	if sharedEnv != nil {
		sharedEnv.stop()
	}
	stopOpsEnv()
	os.Exit(code)
}

// setupIntegration returns the shared environment and a fresh namespace.
func setupIntegration(t *testing.T) (*integrationEnv, string) {
	t.Helper()
	if os.Getenv(testcluster.BinDirEnv) == "" {
		if os.Getenv(requireIntegrationEnv) != "" {
			t.Fatalf("$%s is not set, so there is no control plane to test against", testcluster.BinDirEnv)
		}
		t.Skipf("integration test: needs $%s; run make test", testcluster.BinDirEnv)
	}
	envOnce.Do(func() { sharedEnv, envErr = startIntegrationEnv() })
	if envErr != nil {
		t.Fatalf("starting the control plane: %v", envErr)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bar-it-"}}
	ns, err := sharedEnv.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sharedEnv, ns.Name
}

func startIntegrationEnv() (*integrationEnv, error) {
	ctx, cancel := context.WithCancel(context.Background())
	dir, err := os.MkdirTemp("", "bar-integration-")
	if err != nil {
		cancel()
		return nil, err
	}
	stages, err := testcluster.KwokStages(".")
	if err != nil {
		cancel()
		return nil, err
	}
	cluster, err := testcluster.Start(ctx, testcluster.Options{
		Dir: dir, ControllerManager: true, Scheduler: true, KwokStages: stages,
		CRDs: []string{filepath.Join("artifacts", "crd")},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	env := &integrationEnv{cluster: cluster, writes: &writeCounter{}}
	var wg sync.WaitGroup
	env.stop = func() {
		cancel()
		wg.Wait()
		cluster.Stop()
		if os.Getenv("BAR_KEEP_TEST_DIR") == "" {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "control-plane logs kept in %s\n", dir)
		}
	}
	fail := func(err error) (*integrationEnv, error) { env.stop(); return nil, err }

	env.kube = kubernetes.NewForConfigOrDie(cluster.Config)
	env.bars = clientset.NewForConfigOrDie(cluster.Config)
	if err := cluster.AddNode(ctx, "kwok-node-0"); err != nil {
		return fail(err)
	}

	// The controller gets its own clients, wrapped to count its writes.
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.WrapTransport = env.writes.wrap
	kubeClient := kubernetes.NewForConfigOrDie(cfg)
	barClient := clientset.NewForConfigOrDie(cfg)
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(os.Stderr)))
	ctrlCtx := klog.NewContext(ctx, logger)
	kubeInformers := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, testResync, kubeinformers.WithTransform(dropManagedFields))
	barInformers := informers.NewSharedInformerFactoryWithOptions(barClient, testResync, informers.WithTransform(dropManagedFields))
	env.controller, err = NewController(ctrlCtx, kubeClient, barClient,
		kubeInformers.Apps().V1().Deployments(), barInformers.Barcontroller().V1alpha1().Bars())
	if err != nil {
		return fail(err)
	}
	kubeInformers.Start(ctx.Done())
	barInformers.Start(ctx.Done())
	wg.Go(func() {
		if err := env.controller.Run(ctrlCtx, 2); err != nil {
			logger.Error(err, "controller stopped")
		}
		kubeInformers.Shutdown()
		barInformers.Shutdown()
	})
	return env, nil
}

// writeCounter counts the requests that change something (anything but
// GET, LIST and WATCH), per namespace, as the API server receives them.
type writeCounter struct {
	mu  sync.Mutex
	log map[string][]string // namespace -> "METHOD path" in order
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			w.record(namespaceOf(req.URL.Path), req.Method+" "+req.URL.Path)
		}
		return rt.RoundTrip(req)
	})
}

func (w *writeCounter) record(ns, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.log == nil {
		w.log = map[string][]string{}
	}
	w.log[ns] = append(w.log[ns], what)
}

// since returns the writes to ns after the first n.
func (w *writeCounter) since(ns string, n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.log[ns]) <= n {
		return nil
	}
	return append([]string(nil), w.log[ns][n:]...)
}

func (w *writeCounter) count(ns string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.log[ns])
}

func namespaceOf(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if p == "namespaces" && i+1 < len(parts) {
			return parts[i+1]
		}
	}
	return ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// eventually polls cond every 100ms until it returns true or a minute passes.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
