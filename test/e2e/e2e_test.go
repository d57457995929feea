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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/metrics"
)

// Production operations, against a real API server with bar-controller
// running as a process (see env_test.go). These tests are sequential.

// TestOpsInstallAndServiceAccountRBAC applies artifacts/ and runs the
// controller as the installed ServiceAccount, through every code path that
// needs a permission: its RBAC must be enough, and refuse the rest.
func TestOpsInstallAndServiceAccountRBAC(t *testing.T) {
	env, ns := setupOps(t)
	ctx := t.Context()
	out := env.install(t)
	if strings.Contains(out, "PodSecurity") || strings.Contains(out, "Warning") {
		t.Errorf("kubectl apply warned:\n%s", out)
	}
	checkPodTemplateAdmitted(t, env)

	kubeconfig, saConfig := env.serviceAccountConfig(t)
	// The conversion webhook on, as the Deployment runs it, on a local
	// port the CRD points at.
	c := startController(t, "rbac", kubeconfig,
		slices.Concat(opsElectionFlags, []string{"--leader-elect-lease-namespace=" + installNamespace},
			localWebhook(t, env, installNamespace))...)
	// Secret get, update; CRD get, patch: ready means the webhook's
	// certificate is in the shipped Secret and trusted by the CRD.
	c.waitProbe(t, "/readyz", 200)
	// Lease create, get, update; Bar and Deployment list and watch;
	// Deployment create and patch (apply); bars/status patch; Event create.
	bar := createOpsBar(t, env, ns, "web")
	waitOpsConverged(t, env, ns, bar.Name)
	checkConvertedRead(t, env, ns, bar.Name, bar.Spec.Deployment.Name)
	if holder := leaseHolder(t, env, installNamespace, "bar-controller"); !strings.HasPrefix(holder, "rbac_") {
		t.Errorf("Lease %s/bar-controller held by %q, want the controller", installNamespace, holder)
	}
	waitEvent(t, env, bar, "DeploymentCreated", 1)

	// Event patch: the same drift repaired twice is one Event, counted twice.
	for range 2 {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, bar.Spec.Deployment.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Replicas = ptr.To[int32](5)
			_, err = env.kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the drift to be repaired", func(ctx context.Context) (bool, error) {
			d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, bar.Spec.Deployment.Name, metav1.GetOptions{})
			return err == nil && *d.Spec.Replicas == 1, err
		})
	}
	waitEvent(t, env, bar, "DeploymentUpdated", 2)

	// Deployment delete: a rename replaces the Deployment.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, bar.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		b.Spec.Deployment.Name = "web-renamed"
		_, err = env.bars.BarcontrollerV1().Bars(ns).Update(ctx, b, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitOpsConverged(t, env, ns, bar.Name)
	// The old Deployment goes only once the new one is available. This
	// control plane runs no Deployment controller: the test plays it.
	markAvailable(t, env, ns, "web-renamed")
	eventually(t, "the old Deployment to be deleted", func(ctx context.Context) (bool, error) {
		_, err := env.kube.AppsV1().Deployments(ns).Get(ctx, bar.Spec.Deployment.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	checkForbidden(t, kubernetes.NewForConfigOrDie(saConfig), ns)
	checkWebhookRBAC(t, env)

	c.signal(t, syscall.SIGTERM)
	// 40 s bounds a hang: a sync gets up to 30 s to finish after SIGTERM.
	if st := c.wait(t, 40*time.Second); st.ExitCode() != 0 {
		t.Errorf("after SIGTERM: %v, want exit 0", st)
	}
	// With no other replica to take it, the release is there to see.
	if holder := leaseHolder(t, env, installNamespace, "bar-controller"); holder != "" {
		t.Errorf("after SIGTERM the Lease is still held by %q, want it released", holder)
	}
	// Any missing permission (a refused event write, say) shows up here.
	if log := c.log(t); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("the controller was refused something:%s", c.LogTail(40))
	}
}

// checkForbidden checks that the ServiceAccount cannot do what
// bar-controller has no business doing.
func checkForbidden(t *testing.T, sa kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.28.0"}}}}
	for what, call := range map[string]func() error{
		"create a Pod": func() error {
			_, err := sa.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		},
		"list Secrets in the namespace": func() error {
			_, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"list Secrets cluster-wide": func() error {
			_, err := sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"get a Secret": func() error {
			_, err := sa.CoreV1().Secrets(installNamespace).Get(ctx, "any", metav1.GetOptions{})
			return err
		},
		// Syncs read Deployments from the cache and write them by apply.
		"get a Deployment": func() error {
			_, err := sa.AppsV1().Deployments(ns).Get(ctx, "web-renamed", metav1.GetOptions{})
			return err
		},
		"update a Deployment with PUT": func() error {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web-renamed"}}
			_, err := sa.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		},
		"get a Lease outside its namespace": func() error {
			_, err := sa.CoordinationV1().Leases(ns).Get(ctx, "bar-controller", metav1.GetOptions{})
			return err
		},
		"get another Lease in its namespace": func() error {
			_, err := sa.CoordinationV1().Leases(installNamespace).Get(ctx, "other", metav1.GetOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden", what, err)
		}
	}
}

// checkWebhookRBAC asks the API server what the ServiceAccount may do for
// the webhook's certificate: the one Secret and the one CRD, by name, and
// no other Secret or CRD.
func checkWebhookRBAC(t *testing.T, env *opsEnv) {
	t.Helper()
	sa := "system:serviceaccount:" + installNamespace + ":" + installSA
	for _, q := range [][]string{
		{"get", "secrets/bar-controller-webhook", "-n", installNamespace},
		{"update", "secrets/bar-controller-webhook", "-n", installNamespace},
		{"get", "customresourcedefinitions.apiextensions.k8s.io/bars.barcontroller.dev"},
		{"patch", "customresourcedefinitions.apiextensions.k8s.io/bars.barcontroller.dev"},
	} {
		if !canI(t, env, sa, q...) {
			t.Errorf("%s cannot %v, want yes", sa, q)
		}
	}
	for _, q := range [][]string{
		{"get", "secrets/other", "-n", installNamespace},
		{"update", "secrets/other", "-n", installNamespace},
		{"patch", "secrets/bar-controller-webhook", "-n", installNamespace},
		{"delete", "secrets/bar-controller-webhook", "-n", installNamespace},
		{"create", "secrets", "-n", installNamespace},
		{"get", "secrets/bar-controller-webhook", "-n", "default"},
		{"get", "customresourcedefinitions.apiextensions.k8s.io/other.example.com"},
		{"patch", "customresourcedefinitions.apiextensions.k8s.io/other.example.com"},
		{"update", "customresourcedefinitions.apiextensions.k8s.io/bars.barcontroller.dev"},
		{"delete", "customresourcedefinitions.apiextensions.k8s.io/bars.barcontroller.dev"},
		{"list", "customresourcedefinitions.apiextensions.k8s.io"},
		{"create", "customresourcedefinitions.apiextensions.k8s.io"},
	} {
		if canI(t, env, sa, q...) {
			t.Errorf("%s can %v, want no", sa, q)
		}
	}
}

// checkPodTemplateAdmitted creates, as a dry run, a Pod from the installed
// Deployment's template: Pod Security admission enforces "restricted" on
// the namespace for Pods, which no kubelet ever creates in this cluster.
func checkPodTemplateAdmitted(t *testing.T, env *opsEnv) {
	t.Helper()
	d, err := env.kube.AppsV1().Deployments(installNamespace).Get(t.Context(), "bar-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "template-", Labels: d.Spec.Template.Labels},
		Spec: d.Spec.Template.Spec}
	if _, err := env.kube.CoreV1().Pods(installNamespace).Create(t.Context(), pod, dryRun); err != nil {
		t.Errorf("a Pod from the Deployment's template is refused: %v", err)
	}
	// And the check has teeth: the same Pod without its securityContexts is not.
	pod.Spec.SecurityContext = nil
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].SecurityContext = nil
	}
	if _, err := env.kube.CoreV1().Pods(installNamespace).Create(t.Context(), pod, dryRun); !apierrors.IsForbidden(err) {
		t.Errorf("a Pod without securityContext: got %v, want Forbidden by Pod Security admission", err)
	}
}

// TestOpsReadinessAndMetrics starts the controller before its
// ClusterRoleBinding exists: it is alive but not ready until RBAC lets its
// informers list. Then a sync shows up in the metrics.
func TestOpsReadinessAndMetrics(t *testing.T) {
	env, ns := setupOps(t)
	ctx := t.Context()
	env.install(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	if err := env.kube.RbacV1().ClusterRoleBindings().Delete(ctx, "bar-controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = env.cluster.Kubectl(context.Background(), "apply", "--server-side", "-k", artifactsDir) })

	c := startController(t, "metrics", kubeconfig,
		slices.Concat(opsElectionFlags, []string{"--leader-elect-lease-namespace=" + installNamespace})...)
	c.waitProbe(t, "/healthz", 200)
	// Wait for the informers to have been refused at least once; until
	// they list successfully, the caches cannot be synced.
	eventually(t, "a list refused with 403", func(context.Context) (bool, error) {
		n, _ := c.scrape(t).Value("rest_client_requests_total", map[string]string{"code": "403"})
		return n > 0, nil
	})
	if code := c.probe("/readyz"); code != 503 {
		t.Errorf("/readyz before the caches synced: %d, want 503", code)
	}
	if code := c.probe("/healthz"); code != 200 {
		t.Errorf("/healthz while not ready: %d, want 200", code)
	}

	granted := time.Now()
	env.install(t) // puts the ClusterRoleBinding back
	c.waitProbe(t, "/readyz", 200)
	t.Logf("ready %v after the ClusterRoleBinding was applied (the informers retry with backoff)",
		time.Since(granted).Round(10*time.Millisecond))

	queue := map[string]string{"name": "bars"}
	success := map[string]string{"result": metrics.SyncSuccess}
	before := c.scrape(t)
	adds, _ := before.Value("workqueue_adds_total", queue)
	synced, _ := before.Value("bar_controller_syncs_total", success)
	bar := createOpsBar(t, env, ns, "web")
	waitOpsConverged(t, env, ns, bar.Name)
	// The status the test just read was the sync's last write; the sync
	// counts itself in the metrics only once it has returned, a moment
	// later. Read them once they show it: an ordering, where reading at
	// once raced the controller (hack/flake-hunt.sh caught it, 1 run in 3
	// on a loaded machine).
	var m localcluster.Metrics
	eventually(t, "the converging sync to be counted", func(context.Context) (bool, error) {
		m = c.scrape(t)
		n, _ := m.Value("bar_controller_syncs_total", success)
		return n > synced, nil
	})
	// The Bar went through the queue named bars, and the queue's depth,
	// by that name, is back to 0 once it converged: a depth that leaks
	// (an add the gauge counts twice, a key never taken) stays above it.
	if now, found := m.Value("workqueue_adds_total", queue); !found || now <= adds {
		t.Errorf("workqueue_adds_total%v = %v (found %v) after a Bar was created, want more than the %v before", queue, now, found, adds)
	}
	// The depth drops to 0 as the last sync takes the key, milliseconds
	// after the status it wrote; the minute only bounds a hang, since a
	// leaked depth never drops.
	var depth float64
	var found bool
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		depth, found = c.scrape(t).Value("workqueue_depth", queue)
		return found && depth == 0, nil
	})
	if err != nil {
		t.Errorf("workqueue_depth%v = %v (found %v) a minute after the Bar converged, want 0", queue, depth, found)
	}
	for _, want := range []struct {
		name   string
		labels map[string]string
		min    float64 // the value must be at least this
	}{
		{"workqueue_work_duration_seconds", map[string]string{"name": "bars"}, 1},
		{"bar_controller_syncs_total", map[string]string{"result": metrics.SyncSuccess}, 1},
		{"bar_controller_sync_duration_seconds", map[string]string{"result": metrics.SyncSuccess}, 1},
		{"rest_client_requests_total", map[string]string{"code": "200", "method": "GET"}, 1},
		{"rest_client_requests_total", map[string]string{"code": "201"}, 1},
		{"rest_client_request_duration_seconds", nil, 1},
		{"leader_election_master_status", map[string]string{"name": "bar-controller"}, 1},
		{"go_goroutines", nil, 1},
		{"process_resident_memory_bytes", nil, 1},
	} {
		if v, found := m.Value(want.name, want.labels); !found || v < want.min {
			t.Errorf("%s%v = %v (found %v), want at least %v", want.name, want.labels, v, found, want.min)
		}
	}
}

// markAvailable writes the status the Deployment controller would once all
// replicas of the Deployment are up.
func markAvailable(t *testing.T, env *opsEnv, ns, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := env.kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n,
			ReadyReplicas: n, AvailableReplicas: n}
		_, err = env.kube.AppsV1().Deployments(ns).UpdateStatus(context.Background(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
