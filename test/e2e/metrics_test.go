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
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestOpsSecureMetrics runs the controller under the installed
// ServiceAccount with its default metrics settings: HTTPS, and only callers
// the API server says may get /metrics. The shipped RBAC must let the
// controller ask (TokenReview, SubjectAccessReview), and the shipped
// bar-controller-metrics-reader ClusterRole must be what a scraper needs.
// With --profiling the Go profiles sit behind the same check, per path: the
// reader role does not reach them.
func TestOpsSecureMetrics(t *testing.T) {
	env, ns := setupOps(t)
	ctx := t.Context()
	env.install(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	c := startController(t, "secure-metrics", kubeconfig, "--metrics-secure=true", "--profiling")
	c.waitProbe(t, "/readyz", 200)
	bar := createOpsBar(t, env, ns, "scraped")
	waitOpsConverged(t, env, ns, bar.Name)

	// Two scrapers: one bound to the shipped reader role, one not.
	prometheus, nobody := localcluster.MetricsScrapers(t, env.kube, ns, "e2e")

	// The certificate is self-signed: the scraper trusts the endpoint by
	// the API server's answer about its token, not by the certificate.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed, see above
	}}
	url := "https://" + c.metricsAddr + "/metrics"
	heap := "https://" + c.metricsAddr + "/debug/pprof/heap"
	statusAt := func(url, token string) int {
		t.Helper()
		code, err := localcluster.StatusOf(ctx, insecure, url, token)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	status := func(token string) int { t.Helper(); return statusAt(url, token) }
	if code := status(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code := status("not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("a token the API server does not know: %d, want 401", code)
	}
	if code := status(nobody); code != http.StatusForbidden {
		t.Errorf("a ServiceAccount without the reader role: %d, want 403", code)
	}
	m, err := localcluster.Scrape(insecure, url, prometheus)
	if err != nil {
		t.Fatalf("the reader role's ServiceAccount: %v", err)
	}
	if n, _ := m.Value("bar_controller_syncs_total", nil); n == 0 {
		t.Errorf("bar_controller_syncs_total = 0 after a Bar converged")
	}
	if code := statusAt(heap, prometheus); code != http.StatusForbidden {
		t.Errorf("the metrics reader on /debug/pprof/heap: %d, want 403", code)
	}
	if code := statusAt(heap, env.cluster.Config.BearerToken); code != http.StatusOK {
		t.Errorf("a cluster admin on /debug/pprof/heap: %d, want 200", code)
	}

	// Plain HTTP gets no metrics from the HTTPS port.
	if resp, err := httpClient.Get("http://" + c.metricsAddr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP got metrics from the secure endpoint")
		}
	}
}
