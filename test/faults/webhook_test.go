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

package faults

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
)

// A slow admission webhook is how the cases here make the API server slow
// for one client and not for others: the API server calls it before every
// write it matches and waits for its answer. Real clusters have such
// webhooks (policy engines, image verifiers), and a slow one holds a
// controller's writes, its Lease renewals included, exactly like this.

// hookTimeout is the longest the API server waits for the webhook (the
// most admissionregistration allows). A write the webhook holds longer is
// rejected (failurePolicy Fail).
const hookTimeout = 30 * time.Second

// delayFunc decides how long the API server holds a write: it returns when
// the write may go on. ctx ends when the API server stops waiting (the
// client gave up, or hookTimeout).
type delayFunc func(ctx context.Context, req *admissionv1.AdmissionRequest)

// startHook serves a validating webhook that admits every write it is
// sent once delay returns, and registers it with the API server for the
// writes that match matchCondition (a CEL expression over request, e.g.
// `request.userInfo.username == "x"`). Dry runs are admitted at once. It
// returns once the API server calls it: probe, if not nil, makes a
// matching write (a dry run will do); without it, the matching client
// must be writing already.
func (e *env) startHook(t *testing.T, matchCondition string, delay delayFunc, probe func(context.Context) error) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{}, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		select {
		case called <- struct{}{}:
		default:
		}
		if !ptr.Deref(review.Request.DryRun, false) {
			delay(r.Context(), review.Request)
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})

	name := "bar-faults-slow"
	_, err = e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "slow.faults.barcontroller.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL: ptr.To("https://" + l.Addr().String() + "/"), CABundle: certPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"},
					Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
			}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "chosen", Expression: matchCondition}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(hookTimeout / time.Second)),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server takes the configuration up through an informer: the
	// hook counts once a matching write reaches it. 30 s is a hang bound.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if probe != nil {
			if err := probe(t.Context()); err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("probe write: %v", err)
			}
		}
		select {
		case <-called:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never called webhook %s", name)
		}
	}
}
