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
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// namespacedNS is the namespace artifacts/namespaced installs into and
// watches, as shipped.
const namespacedNS = "bar-apps"

// TestOpsNamespacedInstall applies what a cluster admin installs once (the
// CRD, its admission policies, artifacts/conversion-webhook) and
// artifacts/namespaced as shipped, and runs each under its ServiceAccount
// with its Deployment's flags: Bars in the namespace converge and convert,
// Bars elsewhere are not touched, and the namespace's ServiceAccount can do
// nothing to objects outside its namespace, the CRD least of all.
func TestOpsNamespacedInstall(t *testing.T) {
	env, elsewhere := setupOps(t)
	ctx := t.Context()
	crd := filepath.Join(artifactsDir, "crd")
	if _, err := env.cluster.Kubectl(ctx, "apply", "--server-side", "-f", crd, "-f", filepath.Join(artifactsDir, "admission")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", crd); err != nil {
		t.Fatal(err)
	}
	// The namespace is the user's: the overlay does not create it.
	if _, err := env.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespacedNS}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, k := range []string{"conversion-webhook", "namespaced"} {
		out, err := env.cluster.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(artifactsDir, k))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "Warning") {
			t.Errorf("kubectl apply -k artifacts/%s warned:\n%s", k, out)
		}
	}
	t.Cleanup(func() { _, _ = env.cluster.Kubectl(context.Background(), "apply", "--server-side", "-k", artifactsDir) })
	sa := "system:serviceaccount:" + namespacedNS + ":bar-controller"
	checkNothingClusterWide(t, env, sa, elsewhere)

	// The Deployment's flags, as the kubelet would run them: $(POD_NAMESPACE)
	// expanded from its fieldRef, which is also where the Lease goes by
	// default. Listen addresses are startController's, free ports.
	d, err := env.kube.AppsV1().Deployments(namespacedNS).Get(ctx, "bar-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--metrics-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") ||
			strings.HasPrefix(a, "--conversion-webhook-bind-address") {
			continue
		}
		args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", d.Namespace))
	}
	if !containsArg(args, "--namespace="+namespacedNS) {
		t.Fatalf("the overlay's Deployment runs with %v, want --namespace=%s", args, namespacedNS)
	}
	if !containsArg(d.Spec.Template.Spec.Containers[0].Args, "--conversion-webhook-bind-address=0") {
		t.Fatalf("the overlay's Deployment runs with %v, want the conversion webhook off", d.Spec.Template.Spec.Containers[0].Args)
	}
	// The cluster's conversion webhook, on a local port the CRD points
	// at, with the flags of artifacts/conversion-webhook's Deployment,
	// under the cluster install's ServiceAccount, which keeps the
	// caBundle.
	conv, err := env.kube.AppsV1().Deployments(installNamespace).Get(ctx, "bar-controller-conversion", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var convArgs []string
	for _, a := range conv.Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--health-probe-bind-address") && !strings.HasPrefix(a, "--conversion-webhook-bind-address") {
			convArgs = append(convArgs, a)
		}
	}
	clusterKubeconfig, _ := env.serviceAccountConfig(t)
	converter := startController(t, "namespaced-conversion", clusterKubeconfig, append(convArgs, localWebhook(t, env, installNamespace)...)...)
	converter.waitProbe(t, "/readyz", 200)
	// The shipped default, HTTPS behind the API server's reviews: the
	// auth-delegator binding must be enough for them.
	args = append(args, "--metrics-secure=true", "--leader-elect-lease-namespace="+namespacedNS)
	tr, err := env.kube.CoreV1().ServiceAccounts(namespacedNS).CreateToken(ctx, "bar-controller",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "namespaced.kubeconfig")
	if _, err := env.cluster.WriteKubeconfig(kubeconfig, tr.Status.Token); err != nil {
		t.Fatal(err)
	}

	// The Bar elsewhere exists first: were the controller watching its
	// namespace, it would reach it before the one it converges.
	other := createOpsBar(t, env, elsewhere, "elsewhere")
	c := startController(t, "namespaced", kubeconfig, args...)
	c.waitProbe(t, "/readyz", 200)
	waitLeader(t, env, namespacedNS, "namespaced_")
	bar := createOpsBar(t, env, namespacedNS, "web")
	waitOpsConverged(t, env, namespacedNS, bar.Name)
	waitEvent(t, env, bar, "DeploymentCreated", 1)
	checkConvertedRead(t, env, namespacedNS, bar.Name, bar.Spec.Deployment.Name)

	// A Pod in the namespace runs as this ServiceAccount if it likes: it
	// may change nothing of the CRD every namespace shares.
	checkCRDRefused(t, env, saConfig(t, env, namespacedNS, "bar-controller"), sa, "cannot patch resource", false)

	// Elsewhere: no Deployment, no status.
	if _, err := env.kube.AppsV1().Deployments(elsewhere).Get(ctx, other.Spec.Deployment.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment for the Bar outside the namespace: %v, want NotFound", err)
	}
	o, err := env.bars.BarcontrollerV1().Bars(elsewhere).Get(ctx, other.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Status.ObservedGeneration != 0 || len(o.Status.Conditions) != 0 {
		t.Errorf("the Bar outside the namespace has a status: %+v", o.Status)
	}

	// The metrics endpoint's reviews go through (a cluster admin may get
	// /metrics).
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed
	}}
	if code, err := localcluster.StatusOf(ctx, insecure, "https://"+c.metricsAddr+"/metrics", env.cluster.Config.BearerToken); err != nil || code != http.StatusOK {
		t.Errorf("the admin scraping the namespaced controller: %d, %v; want 200", code, err)
	}

	// Nothing was refused: the controller never reached outside what its
	// Role allows (any such request, a write or a watch, would be 403).
	data, err := os.ReadFile(c.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(string(data)), "forbidden") {
		t.Errorf("the namespaced controller was refused something:%s", c.LogTail(40))
	}
}

// checkNothingClusterWide asks the API server what sa may do: objects in
// its namespace, and outside it nothing but the two reviews and what every
// authenticated user may (discovery, self reviews).
func checkNothingClusterWide(t *testing.T, env *opsEnv, sa, elsewhere string) {
	t.Helper()
	ctx := t.Context()
	canI := func(args ...string) bool { t.Helper(); return canI(t, env, sa, args...) }
	for _, q := range [][]string{
		{"create", "deployments", "--all-namespaces"},
		{"create", "deployments", "-n", elsewhere},
		{"patch", "deployments", "-n", elsewhere},
		{"delete", "deployments", "-n", elsewhere},
		{"list", "deployments", "--all-namespaces"},
		{"list", "bars.barcontroller.dev", "--all-namespaces"},
		{"patch", "bars.barcontroller.dev", "--subresource=status", "-n", elsewhere},
		{"create", "events.events.k8s.io", "-n", elsewhere},
		{"create", "pods", "-n", namespacedNS},
		{"get", "secrets", "-n", namespacedNS},
		{"get", "secrets/other", "-n", namespacedNS},
		{"get", "secrets/bar-controller-webhook", "-n", elsewhere},
		{"get", "secrets/bar-controller-webhook", "-n", namespacedNS},
		{"patch", "customresourcedefinitions.apiextensions.k8s.io/other.example.com"},
		{"list", "customresourcedefinitions.apiextensions.k8s.io"},
		// The CRD every namespace shares: no grant at all.
		{"get", "customresourcedefinitions.apiextensions.k8s.io/" + barCRD},
		{"patch", "customresourcedefinitions.apiextensions.k8s.io/" + barCRD},
		{"update", "customresourcedefinitions.apiextensions.k8s.io/" + barCRD},
		{"patch", "customresourcedefinitions.apiextensions.k8s.io/" + barCRD, "--subresource=status"},
	} {
		if canI(q...) {
			t.Errorf("%s can %v, want no", sa, q)
		}
	}
	for _, q := range [][]string{
		{"create", "deployments", "-n", namespacedNS},
		{"list", "bars.barcontroller.dev", "-n", namespacedNS},
		{"patch", "bars.barcontroller.dev", "--subresource=status", "-n", namespacedNS},
		{"create", "tokenreviews.authentication.k8s.io"},
		{"create", "subjectaccessreviews.authorization.k8s.io"},
	} {
		if !canI(q...) {
			t.Errorf("%s cannot %v, want yes", sa, q)
		}
	}
	// The whole list, outside the namespace: nothing but the two reviews
	// and what any authenticated user may, which a
	// ServiceAccount bound to nothing shows (discovery, self reviews, ...).
	list := func(user string) map[string]string {
		t.Helper()
		out, err := env.cluster.Kubectl(ctx, "auth", "can-i", "--list", "--as="+user, "-n", elsewhere)
		if err != nil {
			t.Fatal(err)
		}
		rules := map[string]string{}
		for _, line := range strings.Split(out, "\n")[1:] {
			// Fields, not the line: kubectl pads the columns to the
			// longest entry, which differs between the two lists.
			if fields := strings.Fields(line); len(fields) > 0 {
				rules[fields[0]] = strings.Join(fields, " ")
			}
		}
		return rules
	}
	if _, err := env.kube.CoreV1().ServiceAccounts(elsewhere).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bound-to-nothing"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	everyone := list("system:serviceaccount:" + elsewhere + ":bound-to-nothing")
	got := list(sa)
	for resource, line := range got {
		if everyone[resource] == line || resource == "tokenreviews.authentication.k8s.io" || resource == "subjectaccessreviews.authorization.k8s.io" {
			continue
		}
		t.Errorf("outside its namespace %s may: %s", sa, line)
	}
	if len(got) <= len(everyone) {
		t.Errorf("can-i --list shows %d rules for %s, %d for a ServiceAccount bound to nothing: the reviews are missing", len(got), sa, len(everyone))
	}
}

// canI asks the API server whether user may do what args say (kubectl auth
// can-i).
func canI(t *testing.T, env *opsEnv, user string, args ...string) bool {
	t.Helper()
	out, err := env.cluster.Kubectl(t.Context(), append([]string{"auth", "can-i", "--as=" + user}, args...)...)
	// The last line; kubectl may warn before it.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	answer := strings.TrimSpace(lines[len(lines)-1])
	// "no" exits 1, and may say why ("no - RBAC: ...").
	if err != nil && !strings.HasPrefix(answer, "no") {
		t.Fatalf("kubectl auth can-i %v: %v", args, err)
	}
	return answer == "yes"
}

func containsArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// TestNamespacedOverlayOneSetting renders a copy of artifacts/ whose
// overlay names another namespace, as a user would set it: every object
// and reference follows, the cluster-scoped binding included.
func TestNamespacedOverlayOneSetting(t *testing.T) {
	env, _ := setupOps(t) // for kubectl
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(artifactsDir)); err != nil {
		t.Fatal(err)
	}
	k := filepath.Join(dir, "namespaced", "kustomization.yaml")
	data, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "\nnamespace: "+namespacedNS+"\n", "\nnamespace: team-a\n", 1)
	if edited == string(data) {
		t.Fatalf("no line %q in %s", "namespace: "+namespacedNS, k)
	}
	if err := os.WriteFile(k, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := env.cluster.Kubectl(t.Context(), "kustomize", filepath.Join(dir, "namespaced"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"name: bar-controller-auth-delegator.team-a",
		"--namespace=$(POD_NAMESPACE)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered overlay lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{namespacedNS, ".NAMESPACE", "namespace: NAMESPACE", "namespace: bar-controller\n", "kind: Namespace\n",
		"bar-controller-webhook", "customresourcedefinitions"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("rendered overlay still has %q:\n%s", unwanted, out)
		}
	}
	if n := strings.Count(out, "namespace: team-a"); n < 10 {
		t.Errorf("%d objects or subjects in team-a, want every one:\n%s", n, out)
	}
}
