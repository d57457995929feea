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
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
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

	prometheus, nobody := localcluster.MetricsScrapers(t, e.kube, "default", "node")

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The certificate is self-signed (no --metrics-cert-dir in the
		// shipped manifests): trust comes from the token check.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	url := "https://" + net.JoinHostPort(lead.Status.PodIP, "8443") + "/metrics"
	status := func(token string) int {
		t.Helper()
		code, err := localcluster.StatusOf(ctx, client, url, token)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := status(nobody); code != http.StatusForbidden {
		t.Errorf("a token without the metrics-reader role: %d, want 403", code)
	}
	// RBAC caches in the API server's authorizer settle within moments.
	var m localcluster.Metrics
	localcluster.Eventually(t, "metrics for the reader role", func(context.Context) (bool, error) {
		var err error
		m, err = localcluster.Scrape(client, url, prometheus)
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
