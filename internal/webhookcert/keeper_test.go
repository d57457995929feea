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

package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
)

const (
	ns, secretName, crdName = "bar-controller", "bar-controller-webhook-tls", "bars.barcontroller.dev"
)

var dnsNames = []string{"bar-controller-webhook.bar-controller.svc", "bar-controller-webhook.bar-controller.svc.cluster.local"}

type cluster struct {
	kube *k8sfake.Clientset
	ext  *extfake.Clientset
	// log is every request either clientset got, in order, as "verb
	// resource" (reactors a test prepends later see them first).
	log []string
}

func newCluster() *cluster {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns}}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crdName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Conversion: &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{
				Service: &apiextensionsv1.ServiceReference{Namespace: ns, Name: "bar-controller-webhook"}}},
		}}}
	c := &cluster{kube: k8sfake.NewClientset(secret), ext: extfake.NewClientset(crd)}
	record := func(a core.Action) (bool, runtime.Object, error) {
		c.log = append(c.log, a.GetVerb()+" "+a.GetResource().Resource)
		return false, nil, nil
	}
	c.kube.PrependReactor("*", "*", record)
	c.ext.PrependReactor("*", "*", record)
	return c
}

// since returns the requests logged after the first n.
func (c *cluster) since(n int) string { return strings.Join(c.log[n:], ", ") }

// replica is one controller process's keeper, at a time the test sets.
func (c *cluster) replica(now *time.Time) *Keeper {
	return &Keeper{Kube: c.kube, Extensions: c.ext, Namespace: ns, SecretName: secretName, CRDName: crdName,
		Names: dnsNames, Validity: DefaultValidity, RotateBefore: DefaultRotateBefore,
		Period: time.Minute, Grace: 5 * time.Minute,
		now: func() time.Time { return *now }}
}

func (c *cluster) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := c.kube.CoreV1().Secrets(ns).Get(context.Background(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (c *cluster) bundle(t *testing.T) []*x509.Certificate {
	t.Helper()
	crd, err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(crd.Spec.Conversion.Webhook.ClientConfig.CABundle)
	if err != nil {
		t.Fatalf("CRD caBundle: %v", err)
	}
	return certs
}

// writes counts the requests that changed something.
func writes(actions []core.Action) int {
	n := 0
	for _, a := range actions {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}

func servedCA(t *testing.T, k *Keeper) *x509.Certificate {
	t.Helper()
	c, err := k.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(c.Certificate[len(c.Certificate)-1])
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func reconcile(t *testing.T, k *Keeper) {
	t.Helper()
	if err := k.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Two replicas start on an empty Secret: the first makes the pair and puts
// its CA in the CRD; the second serves the same pair and writes nothing.
func TestFirstStartAndSecondReplica(t *testing.T) {
	c := newCluster()
	now := time.Now()
	a, b := c.replica(&now), c.replica(&now)
	if a.Ready() == nil {
		t.Fatal("ready before any certificate")
	}
	reconcile(t, a)
	// The API server takes a moment to use a new caBundle: ready only once
	// a pass has read it back from the CRD.
	if a.Ready() == nil {
		t.Fatal("ready in the pass that wrote the CRD's caBundle")
	}
	reconcile(t, a)
	if err := a.Ready(); err != nil {
		t.Fatalf("not ready after the pass that read the caBundle back: %v", err)
	}
	s := c.secret(t)
	if len(s.Data[certKey]) == 0 || len(s.Data[keyKey]) == 0 || len(s.Data[bundleKey]) == 0 {
		t.Fatalf("Secret keys %v, want tls.crt, tls.key, ca.crt", keys(s.Data))
	}
	if bundle := c.bundle(t); len(bundle) != 1 || !bundle[0].Equal(servedCA(t, a)) {
		t.Errorf("CRD bundle holds %d CAs, want the served one", len(bundle))
	}
	leaf, _ := cert.ParseCertsPEM(s.Data[certKey])
	for _, n := range dnsNames {
		if err := leaf[0].VerifyHostname(n); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}

	kubeWrites, extWrites := writes(c.kube.Actions()), writes(c.ext.Actions())
	reconcile(t, b)
	reconcile(t, a)
	if n := writes(c.kube.Actions()) - kubeWrites + writes(c.ext.Actions()) - extWrites; n != 0 {
		t.Errorf("%d writes once the certificate is in place, want 0", n)
	}
	if !servedCA(t, b).Equal(servedCA(t, a)) {
		t.Error("the replicas serve different certificates")
	}
}

// A replica that loses the race to write the Secret writes nothing else
// and serves the winner's pair on its next pass. b read the Secret empty,
// as a had not written yet (a stale read, once), made a pair of its own
// and found a's write in its way (a Conflict, once); its next pass reads
// a's pair and needs no write at all.
func TestConflictReadsTheWinner(t *testing.T) {
	c := newCluster()
	now := time.Now()
	a, b := c.replica(&now), c.replica(&now)
	empty := c.secret(t)
	reconcile(t, a)
	won := c.secret(t).Data[certKey]
	stale, conflict := true, true
	c.kube.PrependReactor("get", "secrets", func(core.Action) (bool, runtime.Object, error) {
		if stale {
			stale = false
			return true, empty.DeepCopy(), nil
		}
		return false, nil, nil
	})
	c.kube.PrependReactor("update", "secrets", func(core.Action) (bool, runtime.Object, error) {
		if conflict {
			conflict = false
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, secretName, nil)
		}
		return false, nil, nil
	})
	kubeWrites, extWrites := writes(c.kube.Actions()), writes(c.ext.Actions())
	if err := b.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "another replica") {
		t.Fatalf("the lost race: %v, want an error that says another replica wrote first", err)
	}
	if stale || conflict {
		t.Fatal("the pass did not read the stale Secret and meet the conflict")
	}
	if _, err := b.GetCertificate(nil); err == nil {
		t.Error("b serves a pair after losing the race: one the Secret and the CRD do not have")
	}
	reconcile(t, b)
	if !servedCA(t, b).Equal(servedCA(t, a)) {
		t.Error("b does not serve the winner's pair on its next pass")
	}
	if !bytes.Equal(c.secret(t).Data[certKey], won) {
		t.Error("the winner's certificate in the Secret was replaced")
	}
	// The one write: b's update that met the conflict.
	if n := writes(c.kube.Actions()) - kubeWrites; n != 1 {
		t.Errorf("%d Secret writes, want only the one that met the conflict", n)
	}
	if n := writes(c.ext.Actions()) - extWrites; n != 0 {
		t.Errorf("%d CRD writes after a lost race, want 0", n)
	}
	if err := b.Ready(); err != nil {
		t.Errorf("b not ready on the winner's pair: %v", err)
	}
}

// Names that are IP addresses (make run: the API server calls
// https://127.0.0.1:9443/convert) are the certificate's IP SANs: a TLS
// client that trusts the CRD's bundle accepts the served certificate for
// each name, and the next pass finds the pair valid for its names and
// writes nothing.
func TestIPAddressNames(t *testing.T) {
	c := newCluster()
	crd := c.crd(t)
	crd.Spec.Conversion.Webhook.ClientConfig.Service = nil
	crd.Spec.Conversion.Webhook.ClientConfig.URL = new("https://127.0.0.1:9443/convert")
	if _, err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Update(context.Background(), crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a := c.replica(&now)
	a.Names = []string{"127.0.0.1", "bar-controller-webhook.bar-controller.svc", "::1"}
	reconcile(t, a)

	leaf, err := cert.ParseCertsPEM(c.secret(t).Data[certKey])
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(leaf[0].IPAddresses); got != "[127.0.0.1 ::1]" {
		t.Errorf("IP SANs %s, want [127.0.0.1 ::1]", got)
	}
	if got := fmt.Sprint(leaf[0].DNSNames); got != "[bar-controller-webhook.bar-controller.svc]" {
		t.Errorf("DNS SANs %s, want only the Service's name", got)
	}

	n := len(c.log)
	reconcile(t, a)
	if got := c.since(n); got != reads {
		t.Errorf("the second pass: %s, want only reads: the pair was not found valid for its own names", got)
	}

	// What the API server does: call the address over TLS, trusting only
	// the CRD's caBundle.
	pool := x509.NewCertPool()
	for _, ca := range c.bundle(t) {
		pool.AddCert(ca)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: a.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Get("https://" + l.Addr().String() + "/convert")
	if err != nil {
		t.Fatalf("TLS client trusting the CRD's bundle: %v", err)
	}
	resp.Body.Close()
}

// A missing Secret is an install error, said as such.
func TestMissingSecret(t *testing.T) {
	c := newCluster()
	if err := c.kube.CoreV1().Secrets(ns).Delete(context.Background(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	err := c.replica(&now).Reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "install manifests") {
		t.Errorf("got %v, want an error pointing at the install manifests", err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
