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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// quietChecks is how many passes every replica's keeper makes in the
// window after settling, each of which reads the Secret and the CRD and
// would write them if it found them wanting.
const quietChecks = 5

// TestCertKeeperReplicasWithDifferentNames: a replica serves the webhook
// for its names; a second one starts with other names (a rollout that
// changes --conversion-webhook-cert-names), neither set holding the
// other. They converge on one certificate for both sets, made before it
// is served (its CA in the CRD's caBundle a grace period first), within a
// minute, with a bundle that never holds more than two CAs and ends with
// one; then they write nothing while each checks quietChecks times more.
// The API server converts through the first replica throughout.
//
// Before the fix each replica replaced a certificate that lacked its own
// names with one for its names alone, served it at once, and added its CA
// to a bundle that kept every CA until it expired.
func TestCertKeeperReplicasWithDifferentNames(t *testing.T) {
	env := startCertEnv(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bar-names"}}
	if _, err := env.kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addrs, err := localcluster.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	// This control plane has no kube-proxy: the API server calls the first
	// replica by URL, so by the name 127.0.0.1, which both sets hold.
	pointCRDAtURL(t, env, addrs[0])
	common := slices.Concat(opsElectionFlags, keeperFlags, []string{"--leader-elect-lease-namespace=" + installNamespace,
		"--namespace=" + ns.Name, "--conversion-webhook-secret=" + installNamespace + "/" + webhookSecret})

	a := startKeeperReplica(t, "names-a", kubeconfig, addrs[0], []string{"127.0.0.1", "bar-controller-webhook.bar-controller.svc"}, common...)
	t.Logf("the first replica settled alone after %v", waitSettled(t, env, installNamespace, time.Now(), nil, a).Round(100*time.Millisecond))
	bar := createOpsBar(t, env, ns.Name, "converted")
	checkConvertedRead(t, env, ns.Name, bar.Name, bar.Spec.Deployment.Name)

	h := watchKeeper(t, env, installNamespace)
	began := time.Now()
	b := startKeeperReplica(t, "names-b", kubeconfig, "", []string{"127.0.0.1", "bar-controller-webhook.bar-controller.svc.cluster.local"}, common...)
	took := waitSettled(t, env, installNamespace, began, h, a, b)
	writes, changes, maxCAs := h.counts(t, 0, 0)
	promotions := h.checkMakeBeforeBreak(t)
	t.Logf("settled %v after the second replica started: %d Secret writes, %d caBundle changes, at most %d CAs, %d promotion(s); %s",
		took.Round(100*time.Millisecond), writes, changes, maxCAs, promotions, h.summary())
	// One certificate for the union, by way of next: made (with its CA in
	// the bundle), seen trusted by the CRD (the promotion time recorded),
	// promoted, and the superseded CA retired. The CRD changes twice: the
	// new CA in, the old one out.
	if writes != 4 || changes != 2 || promotions != 1 {
		t.Errorf("%d Secret writes, %d caBundle changes, %d promotions while settling; want 4, 2 and 1", writes, changes, promotions)
	}
	if maxCAs > 2 {
		t.Errorf("the caBundle held up to %d CAs, want at most 2 (served and next, or served and superseded)", maxCAs)
	}
	checkConvertedRead(t, env, ns.Name, bar.Name, bar.Spec.Deployment.Name)

	quiet(t, h, a, b)
}

// TestCertKeeperConversionOnly: conversion-only replicas (artifacts/
// conversion-only) beside a controller replica. Two of them share the
// controller's Secret but name themselves by another Service as well, so
// the names differ both ways; they converge on one certificate as
// replicas of one Deployment do. A third was applied in another namespace,
// with its own Secret and the names of the Service there, which the CRD
// does not call: it refuses (unready, saying why) and writes nothing,
// neither its Secret nor the CRD's caBundle, while the others settle and
// stay quiet.
//
// Before the fix the replica elsewhere copied its own Secret's CA into the
// CRD's caBundle every pass, and the others copied theirs back.
func TestCertKeeperConversionOnly(t *testing.T) {
	env := startCertEnv(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	const elsewhere = "bar-conversion"
	if _, err := env.kube.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: elsewhere}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	otherSecret, err := env.kube.CoreV1().Secrets(elsewhere).Create(t.Context(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The CRD as shipped calls the Service bar-controller/bar-controller-
	// webhook, so by this name; the test makes the calls itself.
	const called = "bar-controller-webhook.bar-controller.svc"
	h := watchKeeper(t, env, installNamespace)
	began := time.Now()
	secret := "--conversion-webhook-secret=" + installNamespace + "/" + webhookSecret
	// The controller with the default names, the Service's.
	ctl := startKeeperReplica(t, "controller", kubeconfig, "", nil, slices.Concat(opsElectionFlags, keeperFlags,
		[]string{"--leader-elect-lease-namespace=" + installNamespace, "--namespace=" + elsewhere, secret})...)
	ctl.names = []string{called, called + ".cluster.local"}
	var convs []keeperReplica
	for i := range 2 {
		convs = append(convs, startKeeperReplica(t, fmt.Sprintf("conversion-%d", i+1), kubeconfig, "",
			[]string{called, "bar-controller-conversion.bar-controller.svc"},
			slices.Concat(keeperFlags, []string{"--conversion-webhook-only", secret})...))
	}
	// The installed ServiceAccount may read no Secret there: this one runs
	// as the admin, as one with its own RBAC there would.
	other := startKeeperReplica(t, "elsewhere", env.cluster.Kubeconfig, "", nil, slices.Concat(keeperFlags,
		[]string{"--conversion-webhook-only", "--conversion-webhook-secret=" + elsewhere + "/" + webhookSecret})...)

	took := waitSettled(t, env, installNamespace, began, h, ctl, convs[0], convs[1])
	writes, changes, maxCAs := h.counts(t, 0, 0)
	promotions := h.checkMakeBeforeBreak(t)
	t.Logf("settled %v after the replicas started: %d Secret writes, %d caBundle changes, at most %d CAs, %d promotion(s); %s",
		took.Round(100*time.Millisecond), writes, changes, maxCAs, promotions, h.summary())
	// A first certificate for whoever wrote first, then the union by way
	// of next as in TestCertKeeperReplicasWithDifferentNames. The CRD
	// changes three times: the first CA, the next one in, the first out.
	if writes != 5 || changes != 3 || promotions != 1 {
		t.Errorf("%d Secret writes, %d caBundle changes, %d promotions while settling; want 5, 3 and 1", writes, changes, promotions)
	}
	if maxCAs > 2 {
		t.Errorf("the caBundle held up to %d CAs, want at most 2", maxCAs)
	}
	if code, why := other.readyzBody(); code != 503 || !strings.Contains(why, called) {
		t.Errorf("the replica elsewhere: /readyz %d %q, want 503 naming %s, the name the CRD calls", code, why, called)
	}

	quiet(t, h, ctl, convs[0], convs[1], other)
	if s, err := env.kube.CoreV1().Secrets(elsewhere).Get(t.Context(), webhookSecret, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if s.ResourceVersion != otherSecret.ResourceVersion {
		t.Errorf("the replica elsewhere wrote its Secret (resourceVersion %s, created %s)", s.ResourceVersion, otherSecret.ResourceVersion)
	}
	if log := other.log(t); !strings.Contains(log, called) {
		t.Errorf("the replica elsewhere logged nothing naming %s, the name the CRD calls%s", called, other.LogTail(20))
	}
}

// quiet waits for every replica's keeper to make quietChecks more passes
// and checks that none of them wrote the Secret or the CRD meanwhile.
func quiet(t *testing.T, h *keeperHistory, replicas ...keeperReplica) {
	t.Helper()
	s0, c0 := h.marks()
	before := map[string]float64{}
	for _, r := range replicas {
		before[r.Name] = r.checks(t)
	}
	eventually(t, fmt.Sprintf("every replica to check the certificate %d more times", quietChecks), func(context.Context) (bool, error) {
		for _, r := range replicas {
			if r.checks(t)-before[r.Name] < quietChecks {
				return false, nil
			}
		}
		return true, nil
	})
	writes, changes, _ := h.counts(t, s0, c0)
	if s, c := h.marks(); writes != 0 || s != s0 || c != c0 {
		t.Errorf("%d Secret writes and %d CRD versions (%d caBundle changes) while every replica checked %d times, want none; %s",
			writes, c-c0, changes, quietChecks, h.summary())
	}
}

// pointCRDAtURL makes the CRD's conversion webhook call https://addr, as
// localWebhook does; the control plane is the test's own, so nothing
// points it back.
func pointCRDAtURL(t *testing.T, env *opsEnv, addr string) {
	t.Helper()
	ext := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
	patch := `[{"op":"remove","path":"/spec/conversion/webhook/clientConfig/service"},
		{"op":"add","path":"/spec/conversion/webhook/clientConfig/url","value":"https://` + addr + `/convert"}]`
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(t.Context(), barsCRD,
		types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("pointing the CRD's webhook at %s: %v", addr, err)
	}
}
