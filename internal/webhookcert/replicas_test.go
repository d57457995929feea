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
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
)

// The requests of passes, as cluster.since shows them.
const (
	reads    = "get customresourcedefinitions, get secrets"
	update   = reads + ", update secrets"
	patch    = reads + ", patch customresourcedefinitions"
	both     = update + ", patch customresourcedefinitions"
	refusing = "get customresourcedefinitions"
)

// Two replicas with different names, neither set holding the other (a
// controller and a conversion-only replica that names another Service
// too), take turns a minute apart. They converge on one certificate for
// both sets instead of replacing each other's: one first pair, one next
// pair for the union, its promotion a grace period after the CRD carried
// its CA, the superseded CA retired a grace period later; then nothing
// but reads. The requests of every pass are exactly these, the bundle
// never holds more than two CAs, and neither replica is unready after the
// first pass that read its CA back.
func TestDifferentNamesConverge(t *testing.T) {
	c := newCluster()
	now := time.Now().Truncate(time.Second)
	a, b := c.replica(&now), c.replica(&now)
	b.Names = []string{dnsNames[0], "bar-controller-conversion.bar-controller.svc"}
	var got []string
	maxCAs := 0
	for round := range 22 {
		for _, r := range []struct {
			name string
			k    *Keeper
		}{{"a", a}, {"b", b}} {
			n := len(c.log)
			reconcile(t, r.k)
			if p := c.since(n); p != reads {
				got = append(got, fmt.Sprintf("%d %s: %s", round, r.name, p))
			}
			maxCAs = max(maxCAs, len(c.bundle(t)))
			if err := r.k.Ready(); err != nil && round > 0 {
				t.Errorf("round %d: %s not ready: %v", round, r.name, err)
			}
		}
		now = now.Add(time.Minute)
	}
	want := []string{
		"0 a: " + both,   // the first pair, for a's names, served at once; its CA into the CRD
		"0 b: " + both,   // next, for both sets; its CA into the CRD
		"1 a: " + update, // next's CA read in the CRD: promote it 5 minutes later
		"6 a: " + update, // promoted
		"11 a: " + both,  // the superseded CA retired
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("passes that did more than read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if maxCAs > 2 {
		t.Errorf("the CRD's bundle held up to %d CAs, want at most 2", maxCAs)
	}
	if n := len(c.bundle(t)); n != 1 {
		t.Errorf("the CRD's bundle holds %d CAs at the end, want 1", n)
	}
	leaf, err := cert.ParseCertsPEM(c.secret(t).Data[certKey])
	if err != nil {
		t.Fatal(err)
	}
	if !covers(leaf[0], a.Names) || !covers(leaf[0], b.Names) {
		t.Errorf("the certificate is for %v, want every name of %v and %v", namesOf(leaf[0]), a.Names, b.Names)
	}
	if !servedCA(t, a).Equal(servedCA(t, b)) || !servedCA(t, a).Equal(leaf[1]) {
		t.Error("the replicas do not both serve the Secret's pair")
	}
}

// A rotation: step one makes the next pair and puts its CA in the CRD
// while the old pair is served; the next pass reads it there and records
// when it may be served, a grace period later, and not a second earlier
// is it; the superseded CA stays in the bundle for another grace period,
// then leaves, long before it expires. Ready throughout.
func TestRotationKeepsTrust(t *testing.T) {
	c := newCluster()
	now := time.Now().Truncate(time.Second)
	a := c.replica(&now)
	reconcile(t, a)
	reconcile(t, a)
	first := servedCA(t, a)

	now = first.NotAfter.Add(-DefaultRotateBefore + time.Hour).Truncate(time.Second)
	// Certificates are made on the real clock, not the test's: a longer
	// validity makes the new pair end as long after the old one as it
	// would in two months' time.
	a.Validity = 2 * DefaultValidity
	var promoteAfter string
	for i, step := range []struct {
		advance   time.Duration
		want      string
		rotated   bool
		bundle    int
		scheduled bool // the Secret says when to promote: 5 minutes after the first step that does
	}{
		{0, both, false, 2, false}, // step one
		{time.Minute, update, false, 2, true},
		{4*time.Minute + 59*time.Second, reads, false, 2, true},
		{time.Second, update, true, 2, false}, // served: the old CA stays
		{5*time.Minute - time.Second, reads, true, 2, false},
		{time.Second, both, true, 1, false}, // retired
		{time.Hour, reads, true, 1, false},
	} {
		now = now.Add(step.advance)
		n := len(c.log)
		reconcile(t, a)
		if got := c.since(n); got != step.want {
			t.Errorf("step %d: %s, want %s", i, got, step.want)
		}
		if got := !servedCA(t, a).Equal(first); got != step.rotated {
			t.Errorf("step %d: serving the new pair %v, want %v", i, got, step.rotated)
		}
		if got := len(c.bundle(t)); got != step.bundle {
			t.Errorf("step %d: the CRD's bundle holds %d CAs, want %d", i, got, step.bundle)
		}
		if step.scheduled && promoteAfter == "" {
			promoteAfter = now.Add(5 * time.Minute).UTC().Format(time.RFC3339)
		}
		want := ""
		if step.scheduled {
			want = promoteAfter
		}
		if got := c.secret(t).Annotations[PromoteAfterAnnotation]; got != want {
			t.Errorf("step %d: %s %q, want %q", i, PromoteAfterAnnotation, got, want)
		}
		if err := a.Ready(); err != nil {
			t.Errorf("step %d: not ready: %v", i, err)
		}
	}
}

// A bundle the keeper before this one let grow (every unexpired CA kept:
// a fight between replicas added one every few seconds) shrinks to the
// served CA a grace period after the first pass that reads it, which
// records when in the Secret.
func TestUpgradeBoundsAnOldBundle(t *testing.T) {
	c := newCluster()
	now := time.Now().Truncate(time.Second)
	a := c.replica(&now)
	reconcile(t, a)
	s := c.secret(t)
	old := parseBundle(s.Data[bundleKey])
	for range 5 {
		certPEM, _, err := generate(dnsNames, DefaultValidity)
		if err != nil {
			t.Fatal(err)
		}
		ca, _ := caOf(certPEM)
		old = append(old, ca)
	}
	s.Data[bundleKey] = encodeBundle(old)
	if _, err := c.kube.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The six CAs into the CRD, as the old keeper had them; the five that
	// sign nothing served leave 5 minutes from now.
	reconcile(t, a)
	if n := len(c.bundle(t)); n != 6 {
		t.Fatalf("the CRD's bundle holds %d CAs, want the 6 of the Secret", n)
	}
	if got, want := c.secret(t).Annotations[RetireAfterAnnotation], now.Add(5*time.Minute).UTC().Format(time.RFC3339); got != want {
		t.Errorf("%s %q, want %q", RetireAfterAnnotation, got, want)
	}
	for i, step := range []struct {
		advance time.Duration
		want    string
		bundle  int
	}{
		{time.Minute, reads, 6},
		{3*time.Minute + 59*time.Second, reads, 6},
		{time.Second, both, 1},
		{time.Minute, reads, 1},
	} {
		now = now.Add(step.advance)
		n := len(c.log)
		reconcile(t, a)
		if got := c.since(n); got != step.want {
			t.Errorf("step %d: %s, want %s", i, got, step.want)
		}
		if got := len(c.bundle(t)); got != step.bundle {
			t.Errorf("step %d: the CRD's bundle holds %d CAs, want %d", i, got, step.bundle)
		}
	}
}

// A keeper refuses, reading nothing but the CRD and writing nothing, when
// the API server does not call it (its names lack the one the CRD's
// endpoint is checked for) or when another Secret's CAs are the bundle
// for the same endpoint; it says so in Ready. A claim for an endpoint the
// CRD no longer calls binds nobody, and IP addresses compare by value.
func TestRefusals(t *testing.T) {
	const service = "https://bar-controller-webhook.bar-controller.svc:443"
	for _, tc := range []struct {
		name        string
		url         string // the CRD calls this URL instead of the Service
		names       []string
		claim       [2]string // the CRD's annotations: Secret, endpoint
		want        string
		wantRefusal string
	}{
		{name: "another namespace's names", names: []string{"bar-controller-webhook.other.svc"},
			want: refusing, wantRefusal: "as bar-controller-webhook.bar-controller.svc, which is not one of this replica's certificate names"},
		{name: "the Service's names, called by address", url: "https://127.0.0.1:9443/convert", names: dnsNames,
			want: refusing, wantRefusal: "as 127.0.0.1, which is not one"},
		{name: "another Secret keeps the bundle", names: dnsNames, claim: [2]string{"other/certs", service},
			want: refusing, wantRefusal: "kept from Secret other/certs for " + service},
		{name: "another Secret kept it for an endpoint no longer called", names: dnsNames,
			claim: [2]string{"other/certs", "https://127.0.0.1:9443/convert"}, want: both},
		{name: "this Secret keeps it", names: dnsNames, claim: [2]string{ns + "/" + secretName, service}, want: both},
		{name: "an IPv6 address written otherwise", url: "https://[::1]:9443/convert", names: []string{"0:0::1"}, want: both},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster()
			crd := c.crd(t)
			if tc.url != "" {
				crd.Spec.Conversion.Webhook.ClientConfig.Service = nil
				crd.Spec.Conversion.Webhook.ClientConfig.URL = &tc.url
			}
			if tc.claim[0] != "" {
				crd.Annotations = map[string]string{BundleSecretAnnotation: tc.claim[0], BundleEndpointAnnotation: tc.claim[1]}
			}
			if _, err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Update(context.Background(), crd, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			k := c.replica(&now)
			k.Names = tc.names
			n := len(c.log)
			err := k.Reconcile(context.Background())
			if got := c.since(n); got != tc.want {
				t.Errorf("requests %s, want %s", got, tc.want)
			}
			if tc.wantRefusal == "" {
				if err != nil {
					t.Fatal(err)
				}
				got := c.crd(t).Annotations
				if got[BundleSecretAnnotation] != ns+"/"+secretName {
					t.Errorf("the CRD's annotations %v, want them to name this keeper's Secret", got)
				}
				return
			}
			if _, ok := err.(*RefusedError); !ok || !strings.Contains(err.Error(), tc.wantRefusal) {
				t.Errorf("Reconcile: %v, want a refusal with %q", err, tc.wantRefusal)
			}
			if ready := k.Ready(); ready == nil || ready.Error() != err.Error() {
				t.Errorf("Ready: %v, want the refusal", ready)
			}
			if _, err := k.GetCertificate(nil); err == nil {
				t.Error("a refusing keeper serves a certificate")
			}
		})
	}
}

func (c *cluster) crd(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return crd
}
