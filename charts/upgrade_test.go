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
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

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
// the CRD (crds.install=false) keeps it too, and its admission policies.
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
	policies := admissionPolicies(t, kube)
	if len(policies) != 4 {
		t.Fatalf("the chart installed the admission policies %v, want two policies and their bindings", policies)
	}
	helm.run(t, "upgrade", releaseName, chart, "--namespace", releaseName, "--set", "crds.install=false")
	checkCRDKept(t, ext, crdBefore.UID, "the reinstall or crds.install=false")
	// The policies that guard the CRD and its Bars stay with it: before,
	// Helm deleted them as it stopped rendering them (issue 39, round-2
	// review, M2), and a namespaced release needs crds.install=false.
	if after := admissionPolicies(t, kube); !maps.Equal(after, policies) {
		t.Errorf("the admission policies (name: UID) after an upgrade to crds.install=false: %v, want them kept: %v", after, policies)
	}
	if manifest := helm.output(t, "get", "manifest", releaseName, "--namespace", releaseName); strings.Contains(manifest, "kind: CustomResourceDefinition") {
		t.Error("crds.install=false still renders the CRD")
	}
	if d := before.diff(takeSnapshot(t, kube, bars)); len(d) > 0 {
		t.Errorf("the reinstall or crds.install=false changed Bars or Deployments:\n%s", strings.Join(d, "\n"))
	}
}

// admissionPolicies are the chart's ValidatingAdmissionPolicies and their
// bindings that exist, by kind and name, with their UIDs.
func admissionPolicies(t *testing.T, kube kubernetes.Interface) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for _, name := range []string{crdName, "crd-changes.barcontroller.dev"} {
		p, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			out["ValidatingAdmissionPolicy/"+name] = p.UID
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		b, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			out["ValidatingAdmissionPolicyBinding/"+name] = b.UID
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	return out
}
