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

package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// helmNamespace is where the chart is installed: not install.yaml's
// namespace, so that what the chart derives from its release's namespace
// (the CRD's webhook Service, the certificate's names) is tested too.
const helmNamespace = "bar-release"

// TestReleaseFromRegistry installs a release as a user would, from a
// registry: make release pushes the image index, signed, with its SBOMs,
// to a registry this test serves on loopback; the node's containerd,
// which has none of the release's bytes, pulls the image by digest from
// there (counted at the registry); and the release runs twice, from a
// cluster with no bar-controller each time: (a) install.yaml applied as it
// is, (b) helm install of the chart the release pushed beside the image,
// from the registry by digest (oci://...@sha256:). Each must
// give two Ready replicas running the pushed digest, a conversion webhook
// that converts a Bar written in v1alpha1, and that Bar converged.
//
// It replaces the package's own installation (the same objects, another
// image) and removes what it installed when it ends; the next test that
// installs applies the package's again.
func TestReleaseFromRegistry(t *testing.T) {
	e := requireNode(t)
	helm, cosign := tools(t)
	begin := time.Now()
	reg := startRegistry(t)
	rel := makeRelease(t, reg, cosign)
	verifySignature(t, rel, cosign)
	verifyImages(t, reg, rel)
	if _, ok := rel.images[runtime.GOARCH]; !ok {
		t.Fatalf("the release has no image for this node's %s", runtime.GOARCH)
	}
	if err := e.node.TrustRegistry(reg.host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeRelease(t, e, rel) })
	uninstall(t, e, rel)

	t.Run("install.yaml", func(t *testing.T) {
		notOnNode(t, e, rel, false)
		reg.take()
		if out, err := e.cluster.Kubectl(t.Context(), "apply", "--server-side", "-f", filepath.Join(rel.dir, "install.yaml")); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		pods := waitRelease(t, e, installNamespace, rel)
		checkPulled(t, reg.take(), rel, true)
		checkServes(t, e, installNamespace, pods, "release-apply")
	})
	uninstall(t, e, rel)

	t.Run("helm", func(t *testing.T) {
		notOnNode(t, e, rel, true)
		reg.take()
		helmInstall(t, e, helm, rel)
		pods := waitRelease(t, e, helmNamespace, rel)
		requests := reg.take()
		checkChartPulled(t, requests, rel)
		checkPulled(t, requests, rel, false)
		checkServes(t, e, helmNamespace, pods, "release-helm")
	})
	t.Logf("release, checks and both installs from the registry: %v", time.Since(begin).Round(time.Second))
}

// notOnNode fails unless the node's containerd holds none of the release's
// bytes, so that what runs next can only have come from the registry.
// With remove, the release's image is removed first (the previous install
// pulled it).
func notOnNode(t *testing.T, e *env, rel *release, remove bool) {
	t.Helper()
	if remove {
		names, err := e.node.RemoveImage(t.Context(), rel.index.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("removed from the node: %v", names)
	}
	have, err := e.node.ContentDigests(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rel.digests() {
		if have[d] {
			t.Fatalf("the node's containerd already holds %s of the release", d)
		}
	}
}

// checkPulled checks that the node fetched the release by digest from the
// registry: the index, then this node's platform's manifest and config,
// and nothing of the other platform's. The layers are required only with
// layers: once an earlier install has unpacked them, containerd skips
// fetching a layer whose snapshot is still there (held by the stopped
// containers the kubelet has not collected yet): the second install
// fetched the layer again in one run of five, only the config in four.
func checkPulled(t *testing.T, requests map[string]int, rel *release, layers bool) {
	t.Helper()
	t.Logf("registry requests during the install: %v", requests)
	path := "/v2/bar-controller/"
	for arch, d := range rel.images {
		want := []string{"GET " + path + "manifests/" + d.String()}
		for i, b := range rel.blobs[arch] {
			if i == 0 || layers || arch != runtime.GOARCH {
				want = append(want, "GET "+path+"blobs/"+b.String())
			}
		}
		for _, w := range want {
			if got := requests[w]; (arch == runtime.GOARCH) != (got > 0) {
				t.Errorf("%s: %d requests for the %s image (this node is %s)", w, got, arch, runtime.GOARCH)
			}
		}
	}
	if n := requests["GET "+path+"manifests/"+rel.index.String()]; n == 0 {
		t.Errorf("the node never fetched the index %s by digest", rel.index)
	}
}

// waitRelease waits for two Running, Ready controller Pods in ns and
// checks that they run the release: the digest the registry was asked for,
// and the version make release stamped.
func waitRelease(t *testing.T, e *env, ns string, rel *release) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bar-controller"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return len(pods) == 2 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool {
			return p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(&p)
		}), nil
	})
	if err != nil {
		for _, p := range pods {
			t.Logf("Pod %s: %s, container statuses %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		t.Fatalf("waiting for two Ready controller Pods in %s (have %d): %v", ns, len(pods), err)
	}
	for _, p := range pods {
		if s := p.Status.ContainerStatuses; len(s) != 1 || s[0].ImageID != rel.ref {
			t.Errorf("Pod %s runs image ID %v, want %s", p.Name, s, rel.ref)
		}
	}
	out, err := e.cluster.Kubectl(t.Context(), "logs", "--namespace", ns, pods[0].Name)
	if want := `"Starting bar-controller" version="` + releaseVersion + `"`; err != nil || !strings.Contains(out, want) {
		t.Errorf("kubectl logs %s lacks %s (%v):\n%s", pods[0].Name, want, err, out)
	}
	return pods
}

// checkServes checks the install in ns end to end: the CRD converts
// through its webhook Service, whose replicas answer the reviews of a Bar
// created and read in v1alpha1, and the controller converges that Bar.
func checkServes(t *testing.T, e *env, ns string, pods []corev1.Pod, scraper string) {
	t.Helper()
	ctx := t.Context()
	ext, err := apiextensionsclient.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "bars.barcontroller.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := crd.Spec.Conversion; c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil || c.Webhook.ClientConfig.Service == nil ||
		c.Webhook.ClientConfig.Service.Namespace != ns || len(c.Webhook.ClientConfig.CABundle) == 0 {
		t.Fatalf("the CRD does not convert through a webhook in %s with a caBundle: %+v", ns, c)
	}

	reader, _ := localcluster.MetricsScrapers(t, e.kube, "default", scraper)
	barNS, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: barNamespacePrefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := scrapeReviews(t, pods, reader)
	quiet := rest.CopyConfig(e.cluster.Config)
	quiet.WarningHandler = rest.NoWarnings{}
	alpha := clientset.NewForConfigOrDie(quiet).BarcontrollerV1alpha1().Bars(barNS.Name)
	if _, err := alpha.Create(ctx, &barv1alpha1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec:       barv1alpha1.BarSpec{DeploymentName: "app", Replicas: ptr.To[int32](1), Image: appRef},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create in v1alpha1: %v", err)
	}
	waitAvailable(t, e, barNS.Name, "app", 1)
	bar, err := alpha.Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get in v1alpha1: %v", err)
	}
	if bar.Spec.DeploymentName != "app" || bar.Status.AvailableReplicas != 1 {
		t.Errorf("read in v1alpha1: spec %+v, status %+v; want deployment app with 1 available", bar.Spec, bar.Status)
	}
	after := scrapeReviews(t, pods, reader)
	var answered float64
	for _, p := range pods {
		answered += after[p.Name].success - before[p.Name].success
		if f := after[p.Name].failed - before[p.Name].failed; f != 0 {
			t.Errorf("Pod %s failed %v ConversionReviews", p.Name, f)
		}
	}
	// A create costs at least one review, a get one (docs/api-versions.md).
	t.Logf("the replicas answered %v ConversionReviews for one create and one get in v1alpha1", answered)
	if answered < 2 {
		t.Errorf("the replicas answered %v ConversionReviews, want at least 2", answered)
	}
}

// helmInstall installs the release's chart as its notes say: from the
// registry, by the digest chart.txt names (oci://...@sha256:), with no
// value set: the chart there runs the release's image by digest on its
// own. helm fetches the chart from the registry (checkChartPulled).
func helmInstall(t *testing.T, e *env, helm string, rel *release) {
	t.Helper()
	t.Logf("helm install of %s", rel.chart)
	ctx := t.Context()
	for _, args := range [][]string{
		{"create", "namespace", helmNamespace},
		{"label", "namespace", helmNamespace, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted"},
	} {
		if out, err := e.cluster.Kubectl(ctx, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// --plain-http: the test's registry is on loopback, without TLS.
	cmd := exec.CommandContext(ctx, helm, "install", "bar-controller", rel.chart, "--plain-http", "--namespace", helmNamespace)
	cmd.Env = append(os.Environ(), helmEnv(t, e)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
}

// checkChartPulled: helm fetched the chart's manifest by its digest, and
// its archive, from the registry.
func checkChartPulled(t *testing.T, requests map[string]int, rel *release) {
	t.Helper()
	repo, digest, ok := strings.Cut(strings.TrimPrefix(rel.chart, "oci://"), "@")
	_, path, _ := strings.Cut(repo, "/")
	if !ok || requests["GET /v2/"+path+"/manifests/"+digest] == 0 {
		t.Errorf("helm never fetched the chart %s by digest (requests: %v)", rel.chart, requests)
	}
	blobs := 0
	for r, n := range requests {
		if strings.HasPrefix(r, "GET /v2/"+path+"/blobs/") {
			blobs += n
		}
	}
	if blobs == 0 {
		t.Errorf("helm fetched no blob of the chart from the registry (requests: %v)", requests)
	}
}

// helmEnv points helm at the test cluster, with its own cache and
// configuration, nothing of the user's.
func helmEnv(t testing.TB, e *env) []string {
	home := t.TempDir()
	return []string{"KUBECONFIG=" + e.cluster.Kubeconfig, "HELM_CACHE_HOME=" + home + "/cache",
		"HELM_CONFIG_HOME=" + home + "/config", "HELM_DATA_HOME=" + home + "/data"}
}

// uninstall removes install.yaml's objects (the package's own installation
// has the same): the CRD first, while its webhook still serves, which
// deletes every Bar; then the rest, waiting until the namespace is gone,
// so that no replica is left to write the next install's CRD.
func uninstall(t *testing.T, e *env, rel *release) {
	t.Helper()
	if err := uninstallCtx(context.WithoutCancel(t.Context()), e, rel); err != nil {
		t.Fatal(err)
	}
}

func uninstallCtx(ctx context.Context, e *env, rel *release) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"delete", "customresourcedefinition", "bars.barcontroller.dev", "--ignore-not-found", "--wait"},
		{"delete", "--ignore-not-found", "--wait", "-f", filepath.Join(rel.dir, "install.yaml")},
	} {
		if out, err := e.cluster.Kubectl(ctx, args...); err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
	}
	return nil
}

// removeRelease removes what the test installed, whichever step it
// reached (the CRD first, while a webhook may still serve it), and lets
// the next test install the package's own again.
func removeRelease(t *testing.T, e *env, rel *release) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := e.cluster.Kubectl(ctx, "delete", "customresourcedefinition", "bars.barcontroller.dev", "--ignore-not-found", "--wait"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, os.Getenv("HELM"), "uninstall", "bar-controller", "--namespace", helmNamespace, "--ignore-not-found", "--wait")
	cmd.Env = append(os.Environ(), helmEnv(t, e)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("helm uninstall: %v\n%s", err, out)
	}
	if out, err := e.cluster.Kubectl(ctx, "delete", "namespace", helmNamespace, "--ignore-not-found", "--wait"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	if err := uninstallCtx(ctx, e, rel); err != nil {
		t.Error(err)
	}
	installOnce, installErr = sync.Once{}, nil
}
