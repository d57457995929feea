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
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
)

// The webhook as main runs it: once ready, a client that trusts only the
// CRD's caBundle (as the API server does) gets a v1alpha1 Bar converted to
// v1 over HTTPS. It keeps answering after the context ends (a replica sent
// SIGTERM still converts while it leaves the Service) and stops on Stop.
func TestServerServesOverTLSUntilStop(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: InstallNamespace, Name: SecretName}}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: CRDName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Conversion: &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{
				URL: new("https://127.0.0.1:9443" + Path)}},
		}}}
	ext := extfake.NewClientset(crd)
	o := Options{BindAddress: "127.0.0.1:0", SecretNamespace: InstallNamespace, SecretName: SecretName, CertNames: []string{"127.0.0.1"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := start(ctx, o, k8sfake.NewClientset(secret), ext)
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

	got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, CRDName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(got.Spec.Conversion.Webhook.ClientConfig.CABundle) {
		t.Fatal("the CRD's caBundle holds no certificate")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	url := "https://" + s.addr.String() + Path
	convert := func() error {
		body, _ := json.Marshal(apiextensionsv1.ConversionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
			Request: &apiextensionsv1.ConversionRequest{UID: "r1", DesiredAPIVersion: "barcontroller.dev/v1",
				Objects: []runtime.RawExtension{{Raw: []byte(alphaBar)}}},
		})
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out apiextensionsv1.ConversionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		if out.Response == nil || out.Response.Result.Status != metav1.StatusSuccess || len(out.Response.ConvertedObjects) != 1 {
			t.Fatalf("response %+v, want one converted Bar", out.Response)
		}
		if name := get(object(t, out.Response.ConvertedObjects[0]), "spec", "deployment", "name"); name != "web-nginx" {
			t.Errorf("converted spec.deployment.name %v, want web-nginx", name)
		}
		return nil
	}
	if err := convert(); err != nil {
		t.Fatalf("converting over TLS, trusting the CRD's caBundle: %v", err)
	}
	cancel()
	if err := convert(); err != nil {
		t.Fatalf("after the context ended, before Stop: %v", err)
	}
	s.Stop()
	stopped = true
	if err := convert(); err == nil {
		t.Error("still answering after Stop")
	}
}
