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

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// Package e2e runs bar-controller as it runs in production: the binary
// built from this repository in a process of its own, with its flags,
// signals, exit codes, HTTP endpoints and, for the RBAC test, the
// ServiceAccount from artifacts/install, installed with kubectl apply -k.
// It needs a control plane of its own: the integration suite's controller
// watches all namespaces and would reconcile these Bars too. etcd and
// kube-apiserver suffice, since nothing here needs Pods to run. The tests
// run one after another; two of them share the bar-controller Lease.

// installNamespace and installSA are the names artifacts/install uses.
const (
	installNamespace = "bar-controller"
	installSA        = "bar-controller"
)

var (
	// controllerBinary is bar-controller, built once by TestMain.
	controllerBinary string
	// artifactsDir is the repository's artifacts/, what users apply.
	artifactsDir string
)

func TestMain(m *testing.M) {
	code := func() int {
		if os.Getenv(localcluster.BinDirEnv) != "" {
			dir, err := os.MkdirTemp("", "bar-e2e-bin-")
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
		root, err := localcluster.ModuleRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		artifactsDir = filepath.Join(root, "artifacts")
		defer stopOpsEnv()
		defer removePlainBuild()
		return m.Run()
	}()
	os.Exit(code)
}

type opsEnv struct {
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	bars    clientset.Interface
	dir     string
}

var (
	opsOnce   sync.Once
	opsShared *opsEnv
	opsErr    error
)

// setupOps returns the ops control plane, started on first use, and a
// fresh namespace.
func setupOps(t *testing.T) (*opsEnv, string) {
	t.Helper()
	localcluster.SkipWithoutBinaries(t)
	opsOnce.Do(func() { opsShared, opsErr = startOpsEnv() })
	if opsErr != nil {
		t.Fatalf("starting the ops control plane: %v", opsErr)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bar-ops-"}}
	ns, err := opsShared.kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return opsShared, ns.Name
}

func startOpsEnv() (*opsEnv, error) {
	dir, err := os.MkdirTemp("", "bar-ops-")
	if err != nil {
		return nil, err
	}
	// No CRDs here: installing them is part of what install() tests.
	cluster, err := localcluster.Start(context.Background(), localcluster.Options{Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &opsEnv{cluster: cluster, dir: dir,
		kube: kubernetes.NewForConfigOrDie(cluster.Config),
		bars: clientset.NewForConfigOrDie(cluster.Config)}, nil
}

// stopOpsEnv is called by TestMain.
func stopOpsEnv() {
	if opsShared == nil {
		return
	}
	opsShared.cluster.Stop()
	if os.Getenv("BAR_KEEP_TEST_DIR") == "" {
		os.RemoveAll(opsShared.dir)
	} else {
		fmt.Fprintf(os.Stderr, "ops control-plane logs kept in %s\n", opsShared.dir)
	}
}

// install applies artifacts/ the way a user would, and returns
// kubectl's output. Applying again is a no-op, so every test can call it.
func (e *opsEnv) install(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	out, err := e.cluster.Kubectl(ctx, "apply", "--server-side", "-k", artifactsDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/bars.barcontroller.dev"); err != nil {
		t.Fatal(err)
	}
	return out
}

// serviceAccountConfig returns a kubeconfig file and a client configuration
// for the installed ServiceAccount, authenticated by a TokenRequest token,
// as a Pod's projected token would be.
func (e *opsEnv) serviceAccountConfig(t *testing.T) (string, *rest.Config) {
	t.Helper()
	tr, err := e.kube.CoreV1().ServiceAccounts(installNamespace).CreateToken(t.Context(), installSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	rc, err := e.cluster.WriteKubeconfig(path, tr.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	return path, rc
}

func leaseHolder(t *testing.T, env *opsEnv, ns, name string) string {
	t.Helper()
	lease, err := env.kube.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// waitLeader polls the Lease often, since the time it returns at is
// logged as a measurement; the minute only bounds a hang.
func waitLeader(t *testing.T, env *opsEnv, ns, prefix string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := env.kube.CoordinationV1().Leases(ns).Get(ctx, "bar-controller", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && strings.HasPrefix(ptr.Deref(lease.Spec.HolderIdentity, ""), prefix), err
	})
	if err != nil {
		t.Fatalf("waiting for a Lease holder %s*: %v", prefix, err)
	}
}

// createOpsBar creates a Bar in v1, the stored version: no conversion, so
// it needs no webhook.
func createOpsBar(t *testing.T, env *opsEnv, ns, name string) *barv1.Bar {
	t.Helper()
	bar, err := env.bars.BarcontrollerV1().Bars(ns).Create(t.Context(), &barv1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       barv1.BarSpec{Deployment: barv1.BarDeployment{Name: name + "-deploy"}, Replicas: ptr.To[int32](1)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return bar
}

// waitOpsConverged waits until the controller has handled the Bar's current
// generation: its Deployment exists under its control, and the status says
// so. Without kube-controller-manager the Deployment never gets Pods, so
// Ready stays False (ReplicasUnavailable); that is all it can be here.
func waitOpsConverged(t *testing.T, env *opsEnv, ns, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("Bar %s/%s to converge", ns, name), func(ctx context.Context) (bool, error) {
		bar, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, bar.Spec.Deployment.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return metav1.IsControlledBy(d, bar) && bar.Status.ObservedGeneration == bar.Generation, nil
	})
}

// waitEvent waits for the Event with this reason about the Bar to have
// been counted at least count times.
func waitEvent(t *testing.T, env *opsEnv, bar *barv1.Bar, reason string, count int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d %s event(s)", count, reason), func(ctx context.Context) (bool, error) {
		n, err := localcluster.EventCount(ctx, env.kube, bar.Namespace, "Bar", bar.Name, reason)
		return n >= count, err
	})
}

// eventually polls cond until it holds; its minute (localcluster.Eventually)
// bounds a hang, and is no claim about speed.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	localcluster.Eventually(t, what, cond)
}
