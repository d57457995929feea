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
	"encoding/json"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/internal/webhookcert"
)

const barCRD = "bars.barcontroller.dev"

// crdChange is one thing a holder of "patch" on the Bar CRD could do to
// it. allowed: what the certificate keeper itself does, the only changes
// artifacts/admission/crd-changes.barcontroller.dev.yaml lets the
// cluster install's ServiceAccount make.
type crdChange struct {
	what    string
	allowed bool
	change  func(crd *apiextensionsv1.CustomResourceDefinition)
}

// refusedFirstBy are admission checks that may refuse a change before the
// policy is asked, accepted in place of its message. The test API server
// runs OwnerReferencesPermissionEnforcement, as hardened clusters do:
// without delete on the CRD it refuses any owner.
var refusedFirstBy = map[string]string{
	"an owner": "cannot set an ownerRef on a resource you can't delete",
}

func crdChanges(t *testing.T) []crdChange {
	t.Helper()
	pem, _, err := certutil.GenerateSelfSignedCertKey("attacker.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	version := func(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
		for i := range crd.Spec.Versions {
			if crd.Spec.Versions[i].Name == name {
				return &crd.Spec.Versions[i]
			}
		}
		t.Fatalf("CRD %s has no version %s", barCRD, name)
		return nil
	}
	return []crdChange{
		{"its keeper's caBundle", true, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Conversion.Webhook.ClientConfig.CABundle = pem
		}},
		{"its keeper's annotation", true, func(crd *apiextensionsv1.CustomResourceDefinition) {
			metav1.SetMetaDataAnnotation(&crd.ObjectMeta, webhookcert.RetireAfterAnnotation, "2030-01-01T00:00:00Z")
		}},
		{"the webhook's address", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			if cc := crd.Spec.Conversion.Webhook.ClientConfig; cc.URL != nil {
				cc.URL = ptr.To("https://127.0.0.1:1/convert")
			} else {
				cc.Service.Namespace = "attacker"
			}
		}},
		{"no conversion", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
		}},
		{"v1alpha1 not served", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			version(crd, "v1alpha1").Served = false
		}},
		{"v1alpha1 stored", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			version(crd, "v1alpha1").Storage = true
			version(crd, "v1").Storage = false
		}},
		{"the schema", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			version(crd, "v1").Schema.OpenAPIV3Schema.Description = "changed"
		}},
		{"the names", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Names.ShortNames = append(crd.Spec.Names.ShortNames, "attack")
		}},
		{"the review versions", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Conversion.Webhook.ConversionReviewVersions = []string{"v1", "v1beta1"}
		}},
		{"a finalizer", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Finalizers = append(crd.Finalizers, "attacker.example/hold")
		}},
		{"an owner", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.OwnerReferences = append(crd.OwnerReferences, metav1.OwnerReference{
				APIVersion: "v1", Kind: "Namespace", Name: "attacker", UID: "00000000-0000-0000-0000-000000000001"})
		}},
		{"an annotation removed", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			delete(crd.Annotations, "controller-gen.kubebuilder.io/version")
		}},
		{"a label", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			metav1.SetMetaDataLabel(&crd.ObjectMeta, "attacker.example/label", "x")
		}},
		{"another annotation", false, func(crd *apiextensionsv1.CustomResourceDefinition) {
			metav1.SetMetaDataAnnotation(&crd.ObjectMeta, "attacker.example/annotation", "x")
		}},
	}
}

// tryCRDChange makes the change as the client's user, by a JSON patch of
// the spec, labels, annotations, finalizers and owners computed from the
// live CRD (the verb
// RBAC grants the keeper), in a dry run: admission judges it exactly as a
// real one, and nothing is stored.
func tryCRDChange(ctx context.Context, t *testing.T, admin, as apiextensionsclient.Interface, c crdChange) error {
	t.Helper()
	crd, err := admin.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, barCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.change(crd)
	ops := []map[string]any{
		{"op": "add", "path": "/spec", "value": crd.Spec},
		{"op": "add", "path": "/metadata/labels", "value": crd.Labels},
		{"op": "add", "path": "/metadata/annotations", "value": crd.Annotations},
		{"op": "add", "path": "/metadata/finalizers", "value": crd.Finalizers},
		{"op": "add", "path": "/metadata/ownerReferences", "value": crd.OwnerReferences},
		{"op": "test", "path": "/metadata/resourceVersion", "value": crd.ResourceVersion},
	}
	body, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	_, err = as.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, barCRD, types.JSONPatchType, body,
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// checkCRDRefused requires every change the table marks (all of them, or
// the disallowed ones when keeperAllowed) to be refused with a message
// containing want, and, when keeperAllowed, the keeper's own to go
// through. A delete is refused too.
func checkCRDRefused(t *testing.T, env *opsEnv, as *rest.Config, user, want string, keeperAllowed bool) {
	t.Helper()
	ctx := t.Context()
	admin := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
	client := apiextensionsclient.NewForConfigOrDie(as)
	for _, c := range crdChanges(t) {
		err := tryCRDChange(ctx, t, admin, client, c)
		switch {
		case keeperAllowed && c.allowed && err != nil:
			t.Errorf("%s changing %s: %v, want it admitted (the certificate keeper does this)", user, c.what, err)
		case (!keeperAllowed || !c.allowed) && !apierrors.IsForbidden(err):
			t.Errorf("%s changing %s: %v, want Forbidden", user, c.what, err)
		case (!keeperAllowed || !c.allowed) && !strings.Contains(err.Error(), want) &&
			(refusedFirstBy[c.what] == "" || !strings.Contains(err.Error(), refusedFirstBy[c.what])):
			t.Errorf("%s changing %s: %v, want a refusal saying %q", user, c.what, err, want)
		}
	}
	err := client.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, barCRD, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s deleting the CRD: %v, want Forbidden", user, err)
	}
}

// saConfig is a client configuration authenticated as ns/name by a
// TokenRequest token, as that ServiceAccount's Pods are.
func saConfig(t *testing.T, env *opsEnv, ns, name string) *rest.Config {
	t.Helper()
	tr, err := env.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.cluster.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// TestOpsCRDChanges: with artifacts/ installed, the controller's
// ServiceAccount, which RBAC lets patch the Bar CRD, may change its
// caBundle and the certificate keeper's annotations and nothing else; its
// keeper still does its work under that policy (the replica becomes
// ready only once the caBundle trusts its certificate). Any other
// ServiceAccount named bar-controller, for example a namespaced install's
// that kept the binding artifacts/namespaced used to ship, may change
// nothing, though RBAC lets it.
func TestOpsCRDChanges(t *testing.T) {
	env, ns := setupOps(t)
	env.install(t)
	t.Cleanup(func() { _, _ = env.cluster.Kubectl(context.Background(), "apply", "--server-side", "-k", artifactsDir) })
	kubeconfig, installCfg := env.serviceAccountConfig(t)
	c := startController(t, "crd-guard", kubeconfig,
		append([]string{"--conversion-webhook-only"}, localWebhook(t, env, installNamespace)...)...)
	c.waitProbe(t, "/readyz", 200)

	installUser := "system:serviceaccount:" + installNamespace + ":" + installSA
	admin := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
	installClient := apiextensionsclient.NewForConfigOrDie(installCfg)
	// The API server loads a new policy within seconds; until it refuses a
	// label, nothing below would say anything.
	var label crdChange
	for _, c := range crdChanges(t) {
		if c.what == "a label" {
			label = c
		}
	}
	eventually(t, "the CRD policy to refuse the controller a label", func(ctx context.Context) (bool, error) {
		return apierrors.IsForbidden(tryCRDChange(ctx, t, admin, installClient, label)), nil
	})
	checkCRDRefused(t, env, installCfg, installUser, "the controller's ServiceAccount may", true)

	// A leftover grant: RBAC says yes, the policy no.
	ctx := t.Context()
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: installSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bar-controller-webhook." + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bar-controller-webhook"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: installSA, Namespace: ns}},
	}
	if _, err := env.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	tenant := "system:serviceaccount:" + ns + ":" + installSA
	eventually(t, "RBAC to grant the leftover binding", func(context.Context) (bool, error) {
		return canI(t, env, tenant, "patch", "customresourcedefinitions.apiextensions.k8s.io/"+barCRD), nil
	})
	checkCRDRefused(t, env, saConfig(t, env, ns, installSA), tenant, "may not change CustomResourceDefinition "+barCRD, false)

	// The keeper's work is what the policy let through: the caBundle it
	// wrote names its Secret.
	crd, err := admin.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, barCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Conversion.Webhook.ClientConfig.CABundle) == 0 || crd.Annotations[webhookcert.BundleSecretAnnotation] == "" {
		t.Errorf("the keeper wrote no caBundle or annotation: %v", crd.Annotations)
	}
}
