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
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/apiauth"
	"github.com/barcontroller/bar-controller/internal/metrics"
	"github.com/barcontroller/bar-controller/internal/serving"
)

// TestMetricsAuthFloodByAcceptedIdentity: any Pod's token is accepted by
// the API server, so a hostile Pod can make the metrics endpoint's filter
// send access reviews: one per path or method it tries, unless the filter
// bounds it. It floods the endpoint (the real filter, handler and HTTPS
// server, as main.go puts them together, with --profiling so that the
// /debug/pprof/ subtree serves any path under it) with its own accepted
// but unauthorized token, over made-up paths, paths under /debug/pprof/
// and other methods. While it does, scrapers bound to the shipped reader
// role scrape for the first time, each needing a token review and an
// access review: every scrape is 200. Judged by counts: the answers by
// code, and the reviews the filter sent and refused to send.
func TestMetricsAuthFloodByAcceptedIdentity(t *testing.T) {
	env, ns := setupOps(t)
	env.install(t)
	_, cfg := env.serviceAccountConfig(t) // the controller's own identity and RBAC
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := metrics.NewRegistry()
	filter := apiauth.New(client, apiauth.DefaultOptions())
	tlsConfig, err := serving.TLSConfig("", "bar-controller-metrics")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := serving.Listen(t.Context(), "metrics", "127.0.0.1:0", filter.Wrap(metrics.Handler(reg, true)), tlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := "https://" + addr.String()
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // self-signed; trust is the token check
		MaxIdleConnsPerHost: 16}}

	// Scrapers that have not scraped yet, and the flooder: a
	// ServiceAccount with no binding, whose token the API server accepts.
	const scrapers = 3
	var readers []string
	var nobody string
	for i := range scrapers {
		reader, other := localcluster.MetricsScrapers(t, env.kube, ns, fmt.Sprintf("flood%d", i))
		readers, nobody = append(readers, reader), other
	}

	type answer struct {
		kind string
		code int
	}
	var mu sync.Mutex
	codes := map[answer]int{}
	var sent atomic.Int64
	ctx, stopFlood := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				kind, method, path := "made-up path", http.MethodGet, fmt.Sprintf("/x%d-%d", w, i)
				switch i % 3 {
				case 1:
					kind, path = "under /debug/pprof/", fmt.Sprintf("/debug/pprof/x%d-%d", w, i)
				case 2:
					kind, method, path = "another method", fmt.Sprintf("M%d", i%50), "/metrics"
				}
				req, _ := http.NewRequestWithContext(ctx, method, base+path, nil)
				req.Header.Set("Authorization", "Bearer "+nobody)
				resp, err := insecure.Do(req)
				if err != nil {
					continue // the flood's end
				}
				resp.Body.Close()
				sent.Add(1)
				mu.Lock()
				codes[answer{kind, resp.StatusCode}]++
				mu.Unlock()
			}
		})
	}
	// The scrapers come once the flood is well under way: 300 requests
	// are 15 times the returning lane's old burst. 60 s is a hang bound.
	eventually(t, "the flood to send 300 requests", func(context.Context) (bool, error) { return sent.Load() >= 300, nil })
	for i, reader := range readers {
		code, err := localcluster.StatusOf(t.Context(), insecure, base+"/metrics", reader)
		if err != nil || code != http.StatusOK {
			t.Errorf("scraper %d's first scrape during the flood: %d, %v; want 200", i, code, err)
		}
	}
	stopFlood()
	wg.Wait()

	mu.Lock()
	t.Logf("the flood's %d answers by kind and code: %v", sent.Load(), codes)
	for a, n := range codes {
		var ok bool
		switch a.kind {
		case "made-up path":
			ok = a.code == http.StatusNotFound
		case "another method":
			ok = a.code == http.StatusMethodNotAllowed
		default:
			ok = a.code == http.StatusForbidden || a.code == http.StatusTooManyRequests
		}
		if !ok {
			t.Errorf("%d flood requests (%s) answered %d", n, a.kind, a.code)
		}
	}
	mu.Unlock()
	// What the flood cost the API server: access reviews for paths under
	// /debug/pprof/ only, within the flooder's own bucket (the rest
	// refused before any review), and no token review after its first.
	m, err := localcluster.Scrape(insecure, base+"/metrics", readers[0])
	if err != nil {
		t.Fatal(err)
	}
	identity, _ := m.Value("bar_controller_metrics_auth_throttled_total", map[string]string{"review": "access", "reason": "identity"})
	access, _ := m.Value("bar_controller_metrics_auth_reviews_total", map[string]string{"review": "access"})
	tokens, _ := m.Value("bar_controller_metrics_auth_reviews_total", map[string]string{"review": "token"})
	t.Logf("access reviews sent: %.0f, refused for the flooder's identity: %.0f; token reviews: %.0f", access, identity, tokens)
	if identity == 0 {
		t.Error("no access review was refused for the flooder's identity")
	}
	if want := float64(1 + scrapers + 1); tokens > want {
		t.Errorf("%.0f token reviews, want at most %.0f (the flooder's, the scrapers', the last scrape's)", tokens, want)
	}
}
