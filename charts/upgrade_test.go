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

package charts

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// previousChart is the commit whose charts/bar-controller the upgrade
// starts from. No chart has been released yet, so it is the chart's first
// commit; once a release ships one, it becomes that release's commit (a
// chart in a release bundle is this directory with its version and image
// set, hack/release/chart.go).
const previousChart = "4c45364f25b68fc238257e7318cc53fcf0f44eae"

const (
	releaseName = "bar-controller" // and its namespace, as the README installs it
	crdName     = "bars.barcontroller.dev"
	appsNS      = "apps"
	v1Bars      = 20 // created in v1, the stored version
	alphaBars   = 5  // created in v1alpha1, through the conversion webhook
)

// TestHelmUpgradeKeepsBarsAndDeployments installs the previous chart on a
// real API server, converges Bars with the controller running under the
// chart's ServiceAccount and serving the chart's conversion webhook
// through its Service, upgrades to this tree's chart, and requires that
// no Bar and no Deployment the controller made was written: same UID,
// resourceVersion, generation and managedFields, across the upgrade and
// across a restarted controller's full resync after it (what the
// Deployment's rollout does). The CRD is the same object after (not
// deleted and recreated: that would delete every Bar), keeps the caBundle
// the controller put there, its stored versions, and the webhook Secret
// keeps the certificate; every Bar reads the same in v1 and in v1alpha1.
// Then helm uninstall must keep the CRD and every Bar and Deployment, a
// new install adopts the kept CRD, and an upgrade that stops rendering
// the CRD (crds.install=false) keeps it too.
//
// No Pod runs here (there is no node): the controller runs as a process,
// as the chart's Deployment would run it, and the API server reaches its
// webhook through the Service's ClusterIP by an egress proxy
// (upgrade_env_test.go).
func TestHelmUpgradeKeepsBarsAndDeployments(t *testing.T) {
	helmBin := requireHelm(t)
	localcluster.SkipWithoutBinaries(t)
	requireControlPlane(t)
	ctx := t.Context()
	prev := chartAt(t, previousChart)
	binary, err := localcluster.BuildController(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := localcluster.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	webhookAddr := addrs[0]
	proxy := startEgressProxy(t, webhookAddr)
	cluster := startCluster(t, "--egress-selector-config-file="+proxy.configFile(t))
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	ext := apiextensionsclient.NewForConfigOrDie(cluster.Config)
	quiet := rest.CopyConfig(cluster.Config)
	quiet.WarningHandler = rest.NoWarnings{} // v1alpha1's deprecation, on every read
	bars := clientset.NewForConfigOrDie(quiet)
	helm := newHelm(t, helmBin, cluster.Kubeconfig)

	// 1. The previous chart, installed as the README says, and the
	// controller it would run, as its ServiceAccount.
	createNamespace(t, kube, releaseName, map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"})
	helm.run(t, "install", releaseName, prev, "--namespace", releaseName)
	waitEstablished(t, ext)
	// As a cluster upgraded from the v1alpha1-only release has them until
	// its storage migration (docs/upgrade.md): the upgrade must keep serving both.
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crdName, types.MergePatchType,
		[]byte(`{"status":{"storedVersions":["v1alpha1","v1"]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := serviceAccountKubeconfig(t, kube, cluster)
	old := startController(t, binary, "old", kubeconfig, releaseName, webhookAddr)
	old.waitReady(t)

	createNamespace(t, kube, appsNS, nil)
	for i := range v1Bars {
		if _, err := bars.BarcontrollerV1().Bars(appsNS).Create(ctx, &barv1.Bar{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("v1-%02d", i)},
			Spec:       barv1.BarSpec{Deployment: barv1.BarDeployment{Name: fmt.Sprintf("web-v1-%02d", i)}, Replicas: ptr.To(int32(1 + i%3))},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range alphaBars {
		if _, err := bars.BarcontrollerV1alpha1().Bars(appsNS).Create(ctx, &barv1alpha1.Bar{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("alpha-%02d", i)},
			Spec:       barv1alpha1.BarSpec{DeploymentName: fmt.Sprintf("web-alpha-%02d", i), Image: "nginx:1.27.3"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a Bar in v1alpha1, through the webhook's Service: %v", err)
		}
	}
	waitConverged(t, kube, bars)
	old.waitIdle(t, v1Bars+alphaBars)
	before := takeSnapshot(t, kube, bars)
	crdBefore := getCRD(t, ext)
	secretBefore := webhookSecret(t, kube)
	if len(crdBefore.Spec.Conversion.Webhook.ClientConfig.CABundle) == 0 || len(secretBefore) == 0 {
		t.Fatal("the controller did not put its certificate in the Secret and the CRD's caBundle")
	}

	// 2. The upgrade, with the old controller running through it, as the
	// old Pods do until new ones are ready.
	helm.run(t, "upgrade", releaseName, chart, "--namespace", releaseName)
	crdAfter := checkCRDKept(t, ext, crdBefore.UID, "helm upgrade")
	if !bytes.Equal(crdAfter.Spec.Conversion.Webhook.ClientConfig.CABundle, crdBefore.Spec.Conversion.Webhook.ClientConfig.CABundle) {
		t.Error("the upgrade changed the CRD's caBundle: v1alpha1 requests fail until a controller puts it back")
	}
	if !slices.Equal(crdAfter.Status.StoredVersions, crdBefore.Status.StoredVersions) {
		t.Errorf("stored versions %v after the upgrade, were %v", crdAfter.Status.StoredVersions, crdBefore.Status.StoredVersions)
	}
	if s := webhookSecret(t, kube); !maps.EqualFunc(s, secretBefore, bytes.Equal) {
		t.Error("the upgrade changed the webhook's Secret: every replica makes a new certificate")
	}
	compareVersions(t, bars)
	old.stop(t) // its last syncs are done when it exits
	if d := before.diff(takeSnapshot(t, kube, bars)); len(d) > 0 {
		t.Errorf("helm upgrade (with the controller running through it) wrote Bars or Deployments:\n%s", strings.Join(d, "\n"))
	}

	// 3. The new replica: a full resync of every Bar, writing nothing.
	restarted := startController(t, binary, "new", kubeconfig, releaseName, webhookAddr)
	restarted.waitReady(t)
	restarted.waitIdle(t, v1Bars+alphaBars)
	compareVersions(t, bars)
	if d := before.diff(takeSnapshot(t, kube, bars)); len(d) > 0 {
		t.Errorf("the controller restarted after the upgrade wrote Bars or Deployments:\n%s", strings.Join(d, "\n"))
	}
	checkTunnels(t, kube, proxy)
	restarted.stop(t)

	// 4. Uninstall: the release's objects go, the CRD and the Bars stay.
	out := helm.run(t, "uninstall", releaseName, "--namespace", releaseName)
	if !strings.Contains(out, "kept due to the resource policy") || !strings.Contains(out, crdName) {
		t.Errorf("helm uninstall did not say it kept the CRD:\n%s", out)
	}
	if _, err := kube.AppsV1().Deployments(releaseName).Get(ctx, "bar-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller's Deployment after helm uninstall: %v, want NotFound", err)
	}
	checkCRDKept(t, ext, crdBefore.UID, "helm uninstall")
	if d := before.diff(takeSnapshot(t, kube, bars)); len(d) > 0 {
		t.Errorf("helm uninstall changed Bars or Deployments:\n%s", strings.Join(d, "\n"))
	}
	// With no webhook left, v1alpha1 fails and v1 (what is stored) works.
	if _, err := bars.BarcontrollerV1alpha1().Bars(appsNS).Get(ctx, "alpha-00", metav1.GetOptions{}); err == nil {
		t.Error("a v1alpha1 read succeeded with the webhook uninstalled")
	}

	// 5. Installed again under the same name, the chart adopts the kept
	// CRD; an upgrade that no longer renders it leaves it in place.
	helm.run(t, "install", releaseName, chart, "--namespace", releaseName)
	helm.run(t, "upgrade", releaseName, chart, "--namespace", releaseName, "--set", "crds.install=false")
	checkCRDKept(t, ext, crdBefore.UID, "the reinstall or crds.install=false")
	if manifest := helm.output(t, "get", "manifest", releaseName, "--namespace", releaseName); strings.Contains(manifest, "kind: CustomResourceDefinition") {
		t.Error("crds.install=false still renders the CRD")
	}
	if d := before.diff(takeSnapshot(t, kube, bars)); len(d) > 0 {
		t.Errorf("the reinstall or crds.install=false changed Bars or Deployments:\n%s", strings.Join(d, "\n"))
	}
}

// requireHelm returns $HELM, skipping the test without it unless
// $BAR_REQUIRE_HELM says it must be there.
func requireHelm(t *testing.T) string {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		if os.Getenv("BAR_REQUIRE_HELM") != "" {
			t.Fatal("$HELM must name helm (hack/install-tool.sh helm)")
		}
		t.Skip("needs $HELM: run make test-chart")
	}
	return helm
}

// requireControlPlane skips, or fails with $BAR_REQUIRE_INTEGRATION, when
// $KUBE_BIN_DIR lacks the control plane: make test-chart builds kubectl
// only, which the other tests here need.
func requireControlPlane(t *testing.T) {
	t.Helper()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(os.Getenv(localcluster.BinDirEnv), name)); err != nil {
			if os.Getenv(localcluster.RequireEnv) != "" {
				t.Fatal(err)
			}
			t.Skipf("needs %s in $%s: hack/install-k8s-binaries.sh builds it", name, localcluster.BinDirEnv)
		}
	}
}

// chartAt extracts charts/bar-controller as commit has it.
func chartAt(t *testing.T, commit string) string {
	t.Helper()
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit, "charts/bar-controller")
	untar := exec.Command("tar", "-x", "-C", dir)
	untar.Stdin, err = archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	if err := archive.Start(); err != nil {
		t.Fatal(err)
	}
	out, untarErr := untar.CombinedOutput()
	if err := archive.Wait(); err != nil {
		t.Fatalf("git archive %s: %v: %s\nThe upgrade test installs the chart of commit %s from this repository's history; a shallow clone lacks it (git fetch --unshallow).", commit, err, stderr.Bytes(), commit)
	}
	if untarErr != nil {
		t.Fatalf("tar: %v: %s", untarErr, out)
	}
	return filepath.Join(dir, "charts", "bar-controller")
}

// startCluster starts etcd and kube-apiserver, with flags, for this test.
func startCluster(t *testing.T, flags ...string) *localcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "bar-chart-upgrade-")
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := localcluster.Start(t.Context(), localcluster.Options{Dir: dir, APIServerFlags: flags})
	t.Cleanup(func() {
		if cluster != nil {
			cluster.Stop()
		}
		if os.Getenv("BAR_KEEP_TEST_DIR") == "" && !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("control-plane logs kept in %s", dir)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return cluster
}

func createNamespace(t *testing.T, kube kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getCRD(t *testing.T, ext apiextensionsclient.Interface) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return crd
}

// checkCRDKept fails the test unless the CRD is the one installed first
// and is not being deleted: a CRD deleted, or deleted and created again,
// takes every Bar with it (the API server deletes them as it goes).
func checkCRDKept(t *testing.T, ext apiextensionsclient.Interface, uid types.UID, after string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := getCRD(t, ext)
	switch {
	case crd.UID != uid:
		t.Fatalf("after %s the CRD is another object (uid %s, was %s): every Bar went with the first", after, crd.UID, uid)
	case crd.DeletionTimestamp != nil:
		t.Fatalf("after %s the CRD is being deleted, and every Bar with it", after)
	}
	return crd
}

func waitEstablished(t *testing.T, ext apiextensionsclient.Interface) {
	t.Helper()
	localcluster.Eventually(t, "the CRD to be established", func(ctx context.Context) (bool, error) {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// webhookSecret returns the data of the Secret the replicas keep the
// webhook's certificate in.
func webhookSecret(t *testing.T, kube kubernetes.Interface) map[string][]byte {
	t.Helper()
	s, err := kube.CoreV1().Secrets(releaseName).Get(t.Context(), "bar-controller-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// serviceAccountKubeconfig writes a kubeconfig for the chart's
// ServiceAccount, with a TokenRequest token as a Pod's projected one.
func serviceAccountKubeconfig(t *testing.T, kube kubernetes.Interface, cluster *localcluster.Cluster) string {
	t.Helper()
	tr, err := kube.CoreV1().ServiceAccounts(releaseName).CreateToken(t.Context(), "bar-controller",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if _, err := cluster.WriteKubeconfig(path, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitConverged waits until every Bar's current generation is handled:
// its Deployment exists under its control and the status says so.
func waitConverged(t *testing.T, kube kubernetes.Interface, bars clientset.Interface) {
	t.Helper()
	localcluster.Eventually(t, "every Bar to converge", func(ctx context.Context) (bool, error) {
		list, err := bars.BarcontrollerV1().Bars(appsNS).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != v1Bars+alphaBars {
			return false, err
		}
		for _, b := range list.Items {
			d, err := kube.AppsV1().Deployments(appsNS).Get(ctx, b.Spec.Deployment.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if !metav1.IsControlledBy(d, &b) || b.Status.ObservedGeneration != b.Generation {
				return false, nil
			}
		}
		return true, nil
	})
}

// compareVersions reads every Bar in v1 and in v1alpha1 (through the
// webhook's Service) and requires one object in two shapes.
func compareVersions(t *testing.T, bars clientset.Interface) {
	t.Helper()
	v1, err := bars.BarcontrollerV1().Bars(appsNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Bars in v1: %v", err)
	}
	alpha, err := bars.BarcontrollerV1alpha1().Bars(appsNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Bars in v1alpha1, through the webhook's Service: %v", err)
	}
	if len(v1.Items) != v1Bars+alphaBars || len(alpha.Items) != len(v1.Items) {
		t.Fatalf("%d Bars in v1, %d in v1alpha1, want %d", len(v1.Items), len(alpha.Items), v1Bars+alphaBars)
	}
	for i, b := range v1.Items {
		a := alpha.Items[i]
		got := fmt.Sprint(a.Name, a.UID, a.ResourceVersion, a.Spec.DeploymentName, *a.Spec.Replicas, a.Status.ObservedGeneration)
		want := fmt.Sprint(b.Name, b.UID, b.ResourceVersion, b.Spec.Deployment.Name, *b.Spec.Replicas, b.Status.ObservedGeneration)
		if got != want {
			t.Errorf("Bar %s in v1alpha1 %s, in v1 %s", b.Name, got, want)
		}
	}
}

// checkTunnels: every call the API server made to the webhook went to the
// Service's ClusterIP, port 443, as the chart's CRD names it; and there
// were some (the v1alpha1 writes and reads).
func checkTunnels(t *testing.T, kube kubernetes.Interface, proxy *egressProxy) {
	t.Helper()
	svc, err := kube.CoreV1().Services(releaseName).Get(t.Context(), "bar-controller-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := svc.Spec.ClusterIP + ":443"
	tunnels := proxy.tunnels()
	t.Logf("tunnels to the webhook by target: %v", tunnels)
	if tunnels[want] == 0 || len(tunnels) != 1 {
		t.Errorf("the API server's tunnels %v, want them all to %s (the webhook Service)", tunnels, want)
	}
}

// objectVersion is what any write to an object changes.
type objectVersion struct {
	uid             types.UID
	resourceVersion string
	generation      int64
	managedFields   string // manager, operation, subresource and time of each entry
}

// snapshot holds the Bars and Deployments of appsNS, by kind/name.
type snapshot map[string]objectVersion

func versionOf(m metav1.Object) objectVersion {
	var fields []string
	for _, f := range m.GetManagedFields() {
		fields = append(fields, fmt.Sprintf("%s/%s/%s@%s", f.Manager, f.Operation, f.Subresource, f.Time.UTC().Format(time.RFC3339)))
	}
	return objectVersion{m.GetUID(), m.GetResourceVersion(), m.GetGeneration(), strings.Join(fields, ",")}
}

func takeSnapshot(t *testing.T, kube kubernetes.Interface, bars clientset.Interface) snapshot {
	t.Helper()
	s := snapshot{}
	bl, err := bars.BarcontrollerV1().Bars(appsNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range bl.Items {
		s["Bar/"+bl.Items[i].Name] = versionOf(&bl.Items[i])
	}
	dl, err := kube.AppsV1().Deployments(appsNS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range dl.Items {
		s["Deployment/"+dl.Items[i].Name] = versionOf(&dl.Items[i])
	}
	if len(bl.Items) != v1Bars+alphaBars || len(dl.Items) != len(bl.Items) {
		t.Errorf("%d Bars and %d Deployments, want %d of each", len(bl.Items), len(dl.Items), v1Bars+alphaBars)
	}
	return s
}

// diff lists the objects written, deleted or created since s.
func (s snapshot) diff(after snapshot) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		a, ok := after[k]
		switch {
		case !ok:
			out = append(out, k+": deleted")
		case a != s[k]:
			out = append(out, fmt.Sprintf("%s: %+v, was %+v", k, a, s[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if _, ok := s[k]; !ok {
			out = append(out, k+": created")
		}
	}
	return out
}
