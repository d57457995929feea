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
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// startUpgradeEnv starts a control plane of the upgrade test's own: the
// ops one has no kube-controller-manager, and an upgrade needs its
// Deployment and ReplicaSet controllers (Pods that could restart), its
// garbage collector and its storage version migrator, and kwok to run
// the Pods. The audit log is the witness of what the upgrade wrote.
func startUpgradeEnv(t *testing.T) *opsEnv {
	t.Helper()
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	stages, err := localcluster.KwokStages(root)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bar-upgrade-")
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := localcluster.Start(t.Context(), localcluster.Options{Dir: dir,
		ControllerManager: true, Scheduler: true, KwokStages: stages, AuditLog: true})
	t.Cleanup(func() {
		if cluster != nil {
			cluster.Stop()
		}
		if os.Getenv("BAR_KEEP_TEST_DIR") == "" && !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("upgrade control-plane logs kept in %s", dir)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.AddNode(t.Context(), "kwok-node-0"); err != nil {
		t.Fatal(err)
	}
	// The test reads hundreds of Bars in v1alpha1: the deprecation
	// warning is checked once, in kubectl's output (compareKubectlGet),
	// not printed for each.
	quiet := rest.CopyConfig(cluster.Config)
	quiet.WarningHandler = rest.NoWarnings{}
	return &opsEnv{cluster: cluster, dir: dir,
		kube: kubernetes.NewForConfigOrDie(cluster.Config),
		bars: clientset.NewForConfigOrDie(quiet)}
}

// applyKustomization applies dir with kubectl apply --server-side -k, as
// an install or upgrade does, and waits for the CRD if dir has one.
func applyKustomization(t *testing.T, env *opsEnv, dir string, withCRD bool) {
	t.Helper()
	if out, err := env.cluster.Kubectl(t.Context(), "apply", "--server-side", "-k", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if withCRD {
		if _, err := env.cluster.Kubectl(t.Context(), "wait", "--for=condition=Established", "--timeout=60s", "crd/bars.barcontroller.dev"); err != nil {
			t.Fatal(err)
		}
	}
}

// pointWebhookAt makes the CRD's conversion webhook, already a URL (see
// localWebhook), call addr instead: a second set of replicas taking over,
// the way a Service's endpoints would change in a cluster.
func pointWebhookAt(t *testing.T, env *opsEnv, addr string) {
	t.Helper()
	ext := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
	patch := `[{"op":"replace","path":"/spec/conversion/webhook/clientConfig/url","value":"https://` + addr + `/convert"}]`
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(t.Context(), "bars.barcontroller.dev",
		types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createAlphaBars creates n Bars the way users of the previous release
// did, in v1alpha1, a few goroutines at a time; some ask for 2 replicas
// or another image so that not every Deployment looks the same.
func createAlphaBars(t *testing.T, env *opsEnv, ns string, n int) {
	t.Helper()
	alpha := env.bars.BarcontrollerV1alpha1().Bars(ns)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		spec := barv1alpha1.BarSpec{DeploymentName: fmt.Sprintf("web-%03d", i), Replicas: ptr.To[int32](1)}
		if i%4 == 1 {
			spec.Replicas = ptr.To[int32](2)
		}
		if i%5 == 2 {
			spec.Image = "nginx:1.27.3"
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := alpha.Create(t.Context(), &barv1alpha1.Bar{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bar-%03d", i)}, Spec: spec}, metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("creating the Bars in v1alpha1: %v", err)
		}
	}
}

// waitAlphaConverged waits until every Bar, read in v1alpha1, has its
// Deployment under its control with all replicas available (kwok runs the
// Pods), and its status says so for its current generation.
func waitAlphaConverged(t *testing.T, env *opsEnv, ns string, n int) {
	t.Helper()
	var converged int
	// kube-controller-manager's client is limited to 20 requests a second
	// (its --kube-api-qps default), and each Bar's Deployment costs it
	// several (ReplicaSet, Pods, statuses): 300 Bars took 73 s on an idle
	// machine, bound by that limit rather than by the controller.
	err := pollFor(t.Context(), 5*time.Minute, func(ctx context.Context) (bool, error) {
		bars, err := env.bars.BarcontrollerV1alpha1().Bars(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		deps, err := env.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		byName := map[string]int{}
		for i, d := range deps.Items {
			byName[d.Name] = i
		}
		converged = 0
		for _, b := range bars.Items {
			i, ok := byName[b.Spec.DeploymentName]
			if ok && metav1.IsControlledBy(&deps.Items[i], &b) && b.Status.ObservedGeneration == b.Generation &&
				b.Status.AvailableReplicas == ptr.Deref(b.Spec.Replicas, 1) {
				converged++
			}
		}
		return converged == n && len(bars.Items) == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d Bars to converge (%d did): %v", n, converged, err)
	}
}

func pollFor(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if ok || (err != nil && ctx.Err() == nil && !isTransient(err)) {
			return err
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			}
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// isTransient: a conversion webhook that is not ready yet is what an
// upgrade waits out.
func isTransient(err error) bool {
	return strings.Contains(err.Error(), "conversion webhook")
}

// workload is what the Bars' Pods run on: if an upgrade changed any of it,
// a Pod was replaced or a Deployment rewritten.
type workload struct {
	deployments map[string]string // name -> uid/generation/resourceVersion
	replicaSets []string          // uids
	pods        map[string]int32  // uid -> restarts
}

func snapshotWorkload(t *testing.T, env *opsEnv, ns string) workload {
	t.Helper()
	ctx := t.Context()
	w := workload{deployments: map[string]string{}, pods: map[string]int32{}}
	deps, err := env.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		w.deployments[d.Name] = fmt.Sprintf("%s/%d/%s", d.UID, d.Generation, d.ResourceVersion)
	}
	rss, err := env.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss.Items {
		w.replicaSets = append(w.replicaSets, string(rs.UID))
	}
	slices.Sort(w.replicaSets)
	pods, err := env.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		var restarts int32
		for _, s := range p.Status.ContainerStatuses {
			restarts += s.RestartCount
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("Pod %s is %s, want Running", p.Name, p.Status.Phase)
		}
		w.pods[string(p.UID)] = restarts
	}
	return w
}

func (w workload) diff(after workload) []string {
	var out []string
	for name, v := range w.deployments {
		if after.deployments[name] != v {
			out = append(out, fmt.Sprintf("Deployment %s: %s, then %q", name, v, after.deployments[name]))
		}
	}
	if len(after.deployments) != len(w.deployments) {
		out = append(out, fmt.Sprintf("%d Deployments, then %d", len(w.deployments), len(after.deployments)))
	}
	if !slices.Equal(w.replicaSets, after.replicaSets) {
		out = append(out, fmt.Sprintf("ReplicaSets changed: %d, then %d", len(w.replicaSets), len(after.replicaSets)))
	}
	if !maps.Equal(w.pods, after.pods) {
		out = append(out, fmt.Sprintf("Pods replaced or restarted: %d Pods, then %d", len(w.pods), len(after.pods)))
	}
	slices.Sort(out)
	if len(out) > 6 {
		out = append(out[:5], fmt.Sprintf("... %d more", len(out)-5))
	}
	return out
}

// writesSince returns the writes to the given resources in ns that the API
// server received at or after since, by anyone, from the audit log.
func writesSince(t *testing.T, env *opsEnv, ns string, since time.Time, resources ...string) []localcluster.AuditEvent {
	t.Helper()
	writes, err := env.cluster.AuditedWrites(func(e localcluster.AuditEvent) bool {
		return e.ObjectRef != nil && e.ObjectRef.Namespace == ns && slices.Contains(resources, e.ObjectRef.Resource) &&
			!e.Received.Before(since)
	})
	if err != nil {
		t.Fatal(err)
	}
	return writes
}

// describe is a short list of audit events, for failure messages.
func describe(events []localcluster.AuditEvent) string {
	var b strings.Builder
	for i, e := range events {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... %d more", len(events)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s by %s (%s)", e, e.User.Username, e.UserAgent)
	}
	return b.String()
}

// waitIdle waits until the controller has synced at least n Bars since it
// started and its queue is empty, then for a second more of quiet.
func waitIdle(t *testing.T, c *controllerProcess, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s to sync %d Bars and go idle", c.Name, n), func(context.Context) (bool, error) {
		m := c.scrape(t)
		synced, _ := m.Value("bar_controller_syncs_total", map[string]string{"result": "success"})
		depth, _ := m.Value("workqueue_depth", nil)
		return synced >= float64(n) && depth == 0, nil
	})
	time.Sleep(time.Second)
}
