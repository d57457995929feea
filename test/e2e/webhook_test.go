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
	"strings"
	"sync"
	"testing"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// localWebhook points the installed CRD's conversion webhook at a free port
// on this machine and returns the flags that make a controller serve it
// there, with its certificate in the Secret secretNS/bar-controller-webhook
// (the one the manifests ship). This control plane has no kube-proxy, so the
// Service the CRD names leads nowhere; hack/local-up does the same for make
// run. Cleanup, after the controller's (registered later, so run earlier),
// points the CRD back at the Service, as the manifests have it.
func localWebhook(t *testing.T, env *opsEnv, secretNS string) []string {
	t.Helper()
	addrs, err := localcluster.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(ctx context.Context, p string) {
		t.Helper()
		ext := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx,
			"bars.barcontroller.dev", types.JSONPatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patching the CRD's webhook clientConfig: %v", err)
		}
	}
	patch(t.Context(), `[{"op":"remove","path":"/spec/conversion/webhook/clientConfig/service"},
		{"op":"add","path":"/spec/conversion/webhook/clientConfig/url","value":"https://`+addrs[0]+`/convert"}]`)
	t.Cleanup(func() {
		patch(context.Background(), `[{"op":"remove","path":"/spec/conversion/webhook/clientConfig/url"},
			{"op":"add","path":"/spec/conversion/webhook/clientConfig/service",
			 "value":{"namespace":"bar-controller","name":"bar-controller-webhook","path":"/convert","port":443}}]`)
	})
	return []string{"--conversion-webhook-bind-address=" + addrs[0],
		"--conversion-webhook-secret=" + secretNS + "/bar-controller-webhook",
		"--conversion-webhook-cert-names=127.0.0.1"}
}

// warnings collects the API server's warnings (Warning headers).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// checkConvertedRead reads the Bar through v1alpha1: the API server stores
// it as v1, so the answer comes through the conversion webhook, with
// spec.deployment.name back as spec.deploymentName, and with the CRD's
// deprecation warning.
func checkConvertedRead(t *testing.T, env *opsEnv, ns, name, deploymentName string) {
	t.Helper()
	var w warnings
	cfg := rest.CopyConfig(env.cluster.Config)
	cfg.WarningHandler = &w
	alpha, err := clientset.NewForConfigOrDie(cfg).BarcontrollerV1alpha1().Bars(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Bar %s/%s as v1alpha1 (through the conversion webhook): %v", ns, name, err)
	}
	if alpha.Spec.DeploymentName != deploymentName {
		t.Errorf("v1alpha1 spec.deploymentName %q, want %q (v1's spec.deployment.name)", alpha.Spec.DeploymentName, deploymentName)
	}
	if len(w.list) != 1 || !strings.Contains(w.list[0], "barcontroller.dev/v1alpha1 Bar is deprecated") {
		t.Errorf("warnings %q, want the CRD's deprecation warning", w.list)
	}
}

// TestOpsNoWebhookV1Works: with no webhook answering (every replica down,
// or a controller run out of cluster without one), a Bar stored as v1 is
// created, read, listed and written in v1 as ever, since nothing needs
// converting; only requests in v1alpha1 fail, with the API server's error
// naming the webhook, and nothing stored changes.
func TestOpsNoWebhookV1Works(t *testing.T) {
	env, ns := setupOps(t)
	ctx := t.Context()
	env.install(t) // the CRD names the Service, which has no endpoint here
	bar := createOpsBar(t, env, ns, "alone")
	v1 := env.bars.BarcontrollerV1().Bars(ns)
	if _, err := v1.Get(ctx, bar.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("v1 get: %v", err)
	}
	if l, err := v1.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
		t.Errorf("v1 list: %v, %v", l, err)
	}
	bar.Spec.Replicas = new(int32(3))
	updated, err := v1.Update(ctx, bar, metav1.UpdateOptions{})
	if err != nil {
		t.Errorf("v1 update: %v", err)
	}

	_, err = env.bars.BarcontrollerV1alpha1().Bars(ns).Get(ctx, bar.Name, metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "conversion webhook for barcontroller.dev/v1, Kind=Bar failed") {
		t.Errorf("v1alpha1 get without a webhook: %v, want the API server's conversion webhook error", err)
	}
	t.Logf("a v1alpha1 get without a webhook: %v", err)
	if _, err := env.bars.BarcontrollerV1alpha1().Bars(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("v1alpha1 list without a webhook succeeded")
	}
	if updated != nil {
		got, err := v1.Get(ctx, bar.Name, metav1.GetOptions{})
		if err != nil || got.ResourceVersion != updated.ResourceVersion {
			t.Errorf("after the failed v1alpha1 requests: %v, %v; want the Bar as last written", got, err)
		}
	}
}
