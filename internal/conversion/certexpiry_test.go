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

package conversion

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/cert"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// The webhook's certificate expiry metric is the NotAfter of the pair in
// the Secret, the one the keeper serves, from the moment it serves one
// until Stop: an alert reads it to warn of a rotation that keeps failing.
func TestServerExportsCertificateExpiry(t *testing.T) {
	const name = "bar_controller_conversion_webhook_certificate_expiry_timestamp_seconds"
	reg := metrics.NewRegistry()
	expiry := func() (float64, bool) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name && len(f.GetMetric()) == 1 {
				return f.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return 0, false
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: InstallNamespace, Name: SecretName}}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: CRDName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Conversion: &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{
				URL: new("https://127.0.0.1:9443" + Path)}},
		}}}
	kube := k8sfake.NewClientset(secret)
	o := Options{BindAddress: "127.0.0.1:0", SecretNamespace: InstallNamespace, SecretName: SecretName, CertNames: []string{"127.0.0.1"}}
	s, err := start(context.Background(), o, kube, extfake.NewClientset(crd))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30 s: %v", s.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}

	got, err := kube.CoreV1().Secrets(InstallNamespace).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(got.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	want := float64(certs[0].NotAfter.Unix())
	if v, ok := expiry(); !ok || v != want {
		t.Errorf("%s = %v (exported: %v), want the served certificate's NotAfter %v", name, v, ok, want)
	}
	s.Stop()
	stopped = true
	if v, ok := expiry(); ok {
		t.Errorf("%s = %v after Stop, want no series", name, v)
	}
}
