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
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// What the cases read off the controller: its metrics, its log, its probe.

// allEnv makes the slow cases run; make faults sets it, make test does not.
const allEnv = "BAR_FAULTS_ALL"

// slowOnlyEnv makes the quick cases skip. .ci/run sets it (make faults
// FAULTS=slow) for its make faults, which comes right after make test ran
// every quick case, with the controller built with -race: each case then
// runs once per CI run.
const slowOnlyEnv = "BAR_FAULTS_SLOW_ONLY"

// slow skips a case that takes more than about 40 s unless $BAR_FAULTS_ALL
// is set.
func slow(t *testing.T) {
	t.Helper()
	if os.Getenv(allEnv) == "" {
		t.Skipf("slow fault case (over 40 s): runs under make faults, or with $%s=1", allEnv)
	}
}

// quick skips a case that takes less than about 40 s when
// $BAR_FAULTS_SLOW_ONLY is set.
func quick(t *testing.T) {
	t.Helper()
	if os.Getenv(slowOnlyEnv) != "" {
		t.Skipf("quick fault case: $%s is set (make test runs it)", slowOnlyEnv)
	}
}

// metrics scrapes the controller's /metrics (started with insecureMetrics).
func (c *controller) metrics(t *testing.T) localcluster.Metrics {
	t.Helper()
	m, err := localcluster.Scrape(http.DefaultClient, c.metricsURL, "")
	if err != nil {
		t.Fatalf("scraping %s: %v", c.Name, err)
	}
	return m
}

// requests is the number of requests with these HTTP methods that the
// controller's REST clients sent, by client-go's own count
// (rest_client_requests_total), answered or not: every attempt costs the
// API server.
func requests(m localcluster.Metrics, methods ...string) float64 {
	var total float64
	for _, method := range methods {
		v, _ := m.Value("rest_client_requests_total", map[string]string{"method": method})
		total += v
	}
	return total
}

// writes counts every write request: creates (and new Events) are POST,
// server-side apply (and repeated Events) PATCH, Lease renewals PUT.
func writes(m localcluster.Metrics) float64 {
	return requests(m, "POST", "PUT", "PATCH", "DELETE")
}

// syncErrors is bar_controller_syncs_total{result="error"}.
func syncErrors(m localcluster.Metrics) float64 {
	v, _ := m.Value("bar_controller_syncs_total", map[string]string{"result": "error"})
	return v
}

// waitQuiet waits until the controller has made no write for 3 s (its
// Events are sent asynchronously, after the syncs that caused them), and
// returns that scrape: the baseline for what comes next. The 3 s are a
// quiet window, twelve times the 250 ms by which the controller's own
// flush (eventQuiet, events.go) judges its Events written; the minute is
// a hang bound.
func (c *controller) waitQuiet(t *testing.T) localcluster.Metrics {
	t.Helper()
	var last localcluster.Metrics
	quietSince := time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m := c.metrics(t)
		if last == nil || writes(m) != writes(last) {
			last, quietSince = m, time.Now()
		}
		return time.Since(quietSince) >= 3*time.Second, nil
	})
	if err != nil {
		t.Fatalf("%s never stopped writing: %v (%v writes)", c.Name, err, writes(last))
	}
	return last
}

// waitLog waits up to timeout for a line of the process's log that
// contains every one of parts, and returns it. Every timeout its callers
// pass is a hang bound, several times what the line takes (the slowest,
// waitForCaches's first report, comes 5 s after the start).
func waitLog(t *testing.T, p *localcluster.Process, timeout time.Duration, parts ...string) string {
	t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		found = logLine(p, parts...)
		return found != "", nil
	})
	if err != nil {
		t.Fatalf("no line with %q in the log of %s within %v:%s", parts, p.Name, timeout, p.LogTail(20))
	}
	return found
}

// logLine returns the first line of the process's log that contains every
// one of parts, or "".
func logLine(p *localcluster.Process, parts ...string) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
next:
	for _, line := range strings.Split(string(data), "\n") {
		for _, part := range parts {
			if !strings.Contains(line, part) {
				continue next
			}
		}
		return line
	}
	return ""
}

// readyz returns the HTTP status of the controller's /readyz, or 0 if it
// does not answer.
func (c *controller) readyz(ctx context.Context) int {
	code, err := localcluster.StatusOf(ctx, http.DefaultClient, c.readyzURL, "")
	if err != nil {
		return 0
	}
	return code
}
