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

package node

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/internal/testcluster"
)

// TestMetricsScrapedFromThePod scrapes the leader's /metrics at the Pod's
// IP and port 8443, as Prometheus would through the Service: HTTPS, and an
// answer only for a token whose identity may get /metrics. The controller
// asks the API server (TokenReview, SubjectAccessReview) with its own
// in-cluster identity, so this also proves the shipped RBAC for that.
func TestMetricsScrapedFromThePod(t *testing.T) {
	e := requireNode(t)
	install(t, e)
	ctx := t.Context()
	pods := waitReadyReplicas(t, e)
	_, lead := leader(t, e, pods)
	if lead == nil {
		t.Fatal("no leader")
	}

	ns := "default"
	token := func(name string) string {
		t.Helper()
		if _, err := e.kube.CoreV1().ServiceAccounts(ns).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := e.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, nobody := token("node-prometheus"), token("node-nobody")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "node-test-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "bar-controller-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "node-prometheus", Namespace: ns}},
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The certificate is self-signed (no --metrics-cert-dir in the
		// shipped manifests): trust comes from the token check.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	url := "https://" + net.JoinHostPort(lead.Status.PodIP, "8443") + "/metrics"
	status := func(token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := status(nobody); code != http.StatusForbidden {
		t.Errorf("a token without the metrics-reader role: %d, want 403", code)
	}
	// RBAC caches in the API server's authorizer settle within moments.
	var m testcluster.Metrics
	testcluster.Eventually(t, "metrics for the reader role", func(context.Context) (bool, error) {
		var err error
		m, err = testcluster.Scrape(client, url, prometheus)
		return err == nil, nil
	})
	// The scraped Pod is the one the Lease names, and it says so.
	if v, ok := m.Value("leader_election_master_status", nil); !ok || v != 1 {
		t.Errorf("leader_election_master_status = %v (found %v) on the leader, want 1", v, ok)
	}
	if v, _ := m.Value("rest_client_requests_total", nil); v == 0 {
		t.Errorf("rest_client_requests_total = 0: the metrics are not the controller's")
	}
}
