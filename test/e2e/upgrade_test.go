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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// upgradeBars is "a few hundred Bars": enough that the upgrade's every
// step (the rollout, the adoption, the migration) works on many objects,
// few enough for a 2-core CI machine.
const upgradeBars = 300

// The writes a workload would notice: anything done to the Bars'
// Deployments, their ReplicaSets or their Pods.
var workloadResources = []string{"deployments", "replicasets", "pods"}

// TestUpgradeFromV1alpha1Release installs the previous release (its CRD,
// install and controller, built from git), converges Bars with it,
// upgrades with kubectl apply --server-side -k artifacts/ as docs/upgrade.md's
// runbook says, migrates storage, and rolls the controller back, with the
// API server's audit log as the witness that no workload noticed.
func TestUpgradeFromV1alpha1Release(t *testing.T) {
	localcluster.SkipWithoutBinaries(t)
	old := buildRelease(t, previousRelease)
	env := startUpgradeEnv(t)
	ctx := t.Context()
	ns := "upgrade"
	if _, err := env.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	election := append(slices.Clone(opsElectionFlags), "--leader-elect-lease-namespace="+installNamespace)

	// 1. The previous release, as its README installed it, converges Bars
	// written in v1alpha1.
	applyKustomization(t, env, old.artifacts, true)
	kubeconfig, _ := env.serviceAccountConfig(t)
	oldCtl := startBinary(t, old.binary, "old", kubeconfig, election...)
	waitLeader(t, env, installNamespace, "old_")
	start := time.Now()
	createAlphaBars(t, env, ns, upgradeBars)
	waitAlphaConverged(t, env, ns, upgradeBars)
	t.Logf("the previous release converged %d Bars (Pods available) in %v", upgradeBars, time.Since(start).Round(100*time.Millisecond))
	before := snapshotWorkload(t, env, ns)
	checkStored(t, env, map[string]int{"barcontroller.dev/v1alpha1": upgradeBars})

	// 2. The upgrade: the new CRD, install and controller. A new replica
	// starts beside the old one, which stops once the new one is ready, as
	// the Deployment's rolling update does.
	upgraded := time.Now()
	applyKustomization(t, env, artifactsDir, true)
	newCtl := startController(t, "new", kubeconfig, slices.Concat(election, localWebhook(t, env, installNamespace))...)
	newCtl.waitProbe(t, "/readyz", 200)
	ready := time.Now()
	oldCtl.signal(t, syscall.SIGTERM)
	if st := oldCtl.wait(t, 40*time.Second); st.ExitCode() != 0 {
		t.Errorf("the old controller after SIGTERM: %v, want exit 0", st)
	}
	oldGone := time.Now()
	waitLeader(t, env, installNamespace, "new_")
	waitIdle(t, newCtl, upgradeBars)
	t.Logf("upgrade: new replica ready %v after the apply, leading and idle %v after the old one exited",
		ready.Sub(upgraded).Round(10*time.Millisecond), time.Since(oldGone).Round(10*time.Millisecond))

	// 3. Every Bar in both versions, in the API and in kubectl; then
	// written in each.
	compareVersions(t, env, ns, upgradeBars)
	compareKubectlGet(t, env, ns, upgradeBars)
	writeBothVersions(t, env, ns)
	waitIdle(t, newCtl, upgradeBars)

	// 4. The storage migration of the runbook.
	migrateStorage(t, env)
	checkStored(t, env, map[string]int{"barcontroller.dev/v1": upgradeBars})
	waitIdle(t, newCtl, upgradeBars)

	// Across the upgrade, the writes and the migration, the controller
	// wrote nothing (no Deployment, and no Bar status either: what it
	// would write is what the old release wrote), and nothing the Pods
	// run on changed.
	if w := writesSince(t, env, ns, upgraded, workloadResources...); len(w) > 0 {
		t.Errorf("%d writes to the workload since the upgrade, want none:%s", len(w), describe(w))
	}
	if w := writesSince(t, env, ns, oldGone, "bars"); len(controllerWrites(w)) > 0 {
		t.Errorf("the new controller wrote %d Bars, want none:%s", len(controllerWrites(w)), describe(controllerWrites(w)))
	}
	if d := before.diff(snapshotWorkload(t, env, ns)); len(d) > 0 {
		t.Errorf("the workload changed across the upgrade: %s", strings.Join(d, "; "))
	}

	// One Bar changed in v1 before the rollback: the new controller
	// applies its Deployment, whose owner reference then names v1.
	if _, err := env.bars.BarcontrollerV1().Bars(ns).Patch(ctx, "bar-001", types.MergePatchType,
		[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new controller to scale bar-001's Deployment, and its 3 Pods to be available", func(ctx context.Context) (bool, error) {
		d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "web-001", metav1.GetOptions{})
		if err != nil || d.OwnerReferences[0].APIVersion != barv1.SchemeGroupVersion.String() {
			return false, err
		}
		b, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "bar-001", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.AvailableReplicas == 3 &&
			d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 3, err
	})

	// 5. Roll the controller back to the previous release, with the new
	// CRD kept and conversion served by artifacts/conversion-only's
	// converters, started before the new controller stops.
	rollBack(t, env, old, kubeconfig, election, newCtl, ns)
}

// checkStored compares the objects in etcd, by stored apiVersion, with want.
func checkStored(t *testing.T, env *opsEnv, want map[string]int) {
	t.Helper()
	got, err := env.cluster.StoredAPIVersions(t.Context(), "barcontroller.dev", "bars")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Bars in etcd by apiVersion: %v, want %v", got, want)
	}
}

// controllerWrites keeps the writes of the controller's ServiceAccount.
func controllerWrites(events []localcluster.AuditEvent) []localcluster.AuditEvent {
	sa := "system:serviceaccount:" + installNamespace + ":" + installSA
	var out []localcluster.AuditEvent
	for _, e := range events {
		if e.User.Username == sa {
			out = append(out, e)
		}
	}
	return out
}

// compareVersions reads every Bar in v1 and in v1alpha1 and checks that
// they are one object: same uid, resourceVersion and status, with the
// moved fields where each version has them.
func compareVersions(t *testing.T, env *opsEnv, ns string, n int) {
	t.Helper()
	v1, err := env.bars.BarcontrollerV1().Bars(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Bars in v1: %v", err)
	}
	alpha, err := env.bars.BarcontrollerV1alpha1().Bars(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Bars in v1alpha1: %v", err)
	}
	if len(v1.Items) != n || len(alpha.Items) != n {
		t.Fatalf("%d Bars in v1, %d in v1alpha1, want %d", len(v1.Items), len(alpha.Items), n)
	}
	for i, b := range v1.Items {
		a := alpha.Items[i]
		got := fmt.Sprint(a.Name, a.UID, a.ResourceVersion, a.Spec.DeploymentName, *a.Spec.Replicas, a.Spec.Image,
			a.Status.ObservedGeneration, a.Status.AvailableReplicas, len(a.Status.Conditions))
		want := fmt.Sprint(b.Name, b.UID, b.ResourceVersion, b.Spec.Deployment.Name, *b.Spec.Replicas, b.Spec.Template.Image,
			b.Status.ObservedGeneration, b.Status.AvailableReplicas, len(b.Status.Conditions))
		if got != want {
			t.Errorf("Bar %s in v1alpha1 %s, in v1 %s", b.Name, got, want)
		}
	}
}

// compareKubectlGet checks that kubectl shows the same table in both
// versions (the printer columns follow the moved fields), AGE aside, and
// prints the deprecation warning for v1alpha1.
func compareKubectlGet(t *testing.T, env *opsEnv, ns string, n int) {
	t.Helper()
	table := func(resource string) ([]string, string) {
		out, err := env.cluster.Kubectl(t.Context(), "get", resource, "-n", ns)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		var warnings string
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, "Warning:") {
				warnings += line
				continue
			}
			f := strings.Fields(line)
			rows = append(rows, strings.Join(f[:len(f)-1], " "))
		}
		return rows, warnings
	}
	v1, w1 := table("bars.v1.barcontroller.dev")
	alpha, walpha := table("bars.v1alpha1.barcontroller.dev")
	if !slices.Equal(v1, alpha) || len(v1) != n+1 {
		t.Errorf("kubectl get bars: %d rows in v1, %d in v1alpha1, want the same %d; first rows %q and %q",
			len(v1), len(alpha), n+1, v1[:min(3, len(v1))], alpha[:min(3, len(alpha))])
	}
	if w1 != "" || !strings.Contains(walpha, "barcontroller.dev/v1alpha1 Bar is deprecated") {
		t.Errorf("kubectl's warnings: %q in v1, %q in v1alpha1; want the deprecation warning in v1alpha1 only", w1, walpha)
	}
}

// writeBothVersions writes a third of the Bars in v1alpha1 (an update: the
// whole object goes through conversion both ways) and a third in v1 (a
// patch), adding a label, and leaves a third as the old release stored
// them, for the migration to rewrite.
func writeBothVersions(t *testing.T, env *opsEnv, ns string) {
	t.Helper()
	ctx := t.Context()
	for i := range upgradeBars {
		name := fmt.Sprintf("bar-%03d", i)
		var err error
		switch i % 3 {
		case 0:
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				b, err := env.bars.BarcontrollerV1alpha1().Bars(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				b.Labels = map[string]string{"written-in": "v1alpha1"}
				_, err = env.bars.BarcontrollerV1alpha1().Bars(ns).Update(ctx, b, metav1.UpdateOptions{})
				return err
			})
		case 1:
			_, err = env.bars.BarcontrollerV1().Bars(ns).Patch(ctx, name, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"written-in":"v1"}}}`), metav1.PatchOptions{})
		}
		if err != nil {
			t.Fatalf("writing Bar %s: %v", name, err)
		}
	}
	checkStored(t, env, map[string]int{"barcontroller.dev/v1": 2 * upgradeBars / 3, "barcontroller.dev/v1alpha1": upgradeBars / 3})
}

// migrateStorage runs the runbook's StorageVersionMigration and waits for
// kube-controller-manager to finish it and trim the CRD's storedVersions.
func migrateStorage(t *testing.T, env *opsEnv) {
	t.Helper()
	ctx := t.Context()
	crds := apiextensionsclient.NewForConfigOrDie(env.cluster.Config).ApiextensionsV1().CustomResourceDefinitions()
	crd, err := crds.Get(ctx, "bars.barcontroller.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := crd.Status.StoredVersions; !slices.Equal(got, []string{"v1alpha1", "v1"}) {
		t.Errorf("storedVersions before the migration %q, want [v1alpha1 v1]", got)
	}
	start := time.Now()
	svm := &storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "bars-to-v1"},
		Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "barcontroller.dev", Resource: "bars"}}}
	if _, err := env.kube.StoragemigrationV1().StorageVersionMigrations().Create(ctx, svm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// 46-48 s on an idle machine: before it patches any Bar, the
	// migrator requeues, with backoff, until the garbage collector's
	// monitor of Bars has caught up with the migration's resourceVersion
	// (SVMController.sync in kube-controller-manager's
	// pkg/controller/storageversionmigrator).
	err = pollFor(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		svm, err := env.kube.StoragemigrationV1().StorageVersionMigrations().Get(ctx, "bars-to-v1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if c := apimeta.FindStatusCondition(svm.Status.Conditions, string(storagemigrationv1.MigrationFailed)); c != nil && c.Status == metav1.ConditionTrue {
			return false, fmt.Errorf("the migration failed: %s", c.Message)
		}
		if !apimeta.IsStatusConditionTrue(svm.Status.Conditions, string(storagemigrationv1.MigrationSucceeded)) {
			return false, nil
		}
		crd, err := crds.Get(ctx, "bars.barcontroller.dev", metav1.GetOptions{})
		return err == nil && slices.Equal(crd.Status.StoredVersions, []string{"v1"}), err
	})
	if err != nil {
		t.Fatalf("waiting for the migration to succeed and storedVersions to become [v1]: %v", err)
	}
	t.Logf("storage migration of %d Bars: Succeeded and storedVersions [v1] after %v", upgradeBars, time.Since(start).Round(100*time.Millisecond))
}

// rollBack runs the previous release again while the new CRD stays, as
// docs/upgrade.md's "Rolling back" says: conversion-only replicas first, then
// the old install and controller. The old controller reads every Bar (all
// stored as v1 now) through conversion, adopts every Deployment without
// writing it, and keeps working on Bars created in v1, whose resources
// survive it.
func rollBack(t *testing.T, env *opsEnv, old release, kubeconfig string, election []string, newCtl *controllerProcess, ns string) {
	t.Helper()
	ctx := t.Context()
	addrs, err := localcluster.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	conv := startController(t, "converter", kubeconfig, "--conversion-webhook-only",
		"--conversion-webhook-bind-address="+addrs[0],
		"--conversion-webhook-secret="+installNamespace+"/bar-controller-webhook", "--conversion-webhook-cert-names=127.0.0.1")
	conv.waitProbe(t, "/readyz", 200)
	pointWebhookAt(t, env, addrs[0])
	newCtl.signal(t, syscall.SIGTERM)
	if st := newCtl.wait(t, 40*time.Second); st.ExitCode() != 0 {
		t.Errorf("the new controller after SIGTERM: %v, want exit 0", st)
	}
	rolledBack := time.Now()
	applyKustomization(t, env, old.artifacts+"/install", false)
	oldCtl := startBinary(t, old.binary, "old-again", kubeconfig, election...)
	waitLeader(t, env, installNamespace, "old-again_")
	waitIdle(t, oldCtl, upgradeBars)
	// The previous release compares owner references by apiVersion: the
	// one Deployment the new release wrote (bar-001's, its reference now
	// in v1) gets one apply back to v1alpha1, with the same Pod template;
	// every other Deployment none. The Deployment controller copies the
	// Deployment's changed annotation to its ReplicaSet (an update), but
	// creates no ReplicaSet and replaces no Pod.
	w := controllerWrites(writesSince(t, env, ns, rolledBack, workloadResources...))
	if len(w) != 1 || w[0].String() != "patch deployments "+ns+"/web-001 200" {
		t.Errorf("the rolled-back controller wrote %d times while adopting, want one apply of web-001:%s", len(w), describe(w))
	}
	var replaced []localcluster.AuditEvent
	for _, e := range writesSince(t, env, ns, rolledBack, "replicasets", "pods") {
		if e.Verb == "create" || e.Verb == "delete" {
			replaced = append(replaced, e)
		}
	}
	if len(replaced) > 0 {
		t.Errorf("%d ReplicaSets or Pods created or deleted since the rollback, want none:%s", len(replaced), describe(replaced))
	}

	// A Bar created in v1 with resources: the old controller makes its
	// Deployment and writes its status in v1alpha1; a v1alpha1 client
	// writes it too; v1 still has the resources.
	resources := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}
	bar, err := env.bars.BarcontrollerV1().Bars(ns).Create(ctx, &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: "after-rollback"},
		Spec: barv1.BarSpec{Replicas: ptr.To[int32](1), Deployment: barv1.BarDeployment{Name: "after-rollback"},
			Template: barv1.BarPodTemplate{Resources: resources}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitAlphaConverged(t, env, ns, upgradeBars+1)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a, err := env.bars.BarcontrollerV1alpha1().Bars(ns).Get(ctx, bar.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a.Labels = map[string]string{"written-in": "v1alpha1"}
		_, err = env.bars.BarcontrollerV1alpha1().Bars(ns).Update(ctx, a, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, bar.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Spec.Template.Resources.Requests.Cpu().Equal(resource.MustParse("10m")) || got.Labels["written-in"] != "v1alpha1" {
		t.Errorf("after the old controller and a v1alpha1 client wrote it, the v1 Bar has resources %v and labels %v, want cpu 10m and the label",
			got.Spec.Template.Resources, got.Labels)
	}
	// A spec change in v1alpha1 reaches the Deployment through the old
	// controller.
	if _, err := env.bars.BarcontrollerV1alpha1().Bars(ns).Patch(ctx, "bar-000", types.MergePatchType,
		[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old controller to scale bar-000's Deployment", func(ctx context.Context) (bool, error) {
		d, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "web-000", metav1.GetOptions{})
		return err == nil && ptr.Deref(d.Spec.Replicas, 0) == 3, err
	})
}
