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
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// What the chart's tests need around them: helm, a real API server, the
// previous chart, and the CRD, Secret and Bars they read back.

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
	return startClusterWith(t, localcluster.Options{APIServerFlags: flags})
}

// startClusterWith starts what opts says (its Dir is the test's own).
func startClusterWith(t *testing.T, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "bar-chart-upgrade-")
	if err != nil {
		t.Fatal(err)
	}
	opts.Dir = dir
	cluster, err := localcluster.Start(t.Context(), opts)
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
