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

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// checkMonitoring: the bundle's monitoring.yaml is what docs/runbook.md's
// alerts need (the alerts, the scrape, Prometheus's discovery grant, the
// dashboard), runs no image, and links every alert to the runbook of the
// release's tag.
func checkMonitoring(t *testing.T, dir, version string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "monitoring.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{"\nkind: PrometheusRule\n", "\nkind: ServiceMonitor\n", "\nkind: RoleBinding\n", "name: bar-controller-dashboard\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("monitoring.yaml has no %q", strings.TrimSpace(want))
		}
	}
	if imageLine.MatchString(text) {
		t.Error("monitoring.yaml runs an image")
	}
	urls := regexp.MustCompile(`runbook_url: (\S+)`).FindAllStringSubmatch(text, -1)
	want := runbookBase + runbookRef(version) + "/docs/runbook.md#"
	for _, u := range urls {
		if !strings.HasPrefix(u[1], want) {
			t.Errorf("monitoring.yaml links %s, want %s...", u[1], want)
		}
	}
	if len(urls) < 10 {
		t.Errorf("monitoring.yaml has %d runbook links", len(urls))
	}
}

// TestRunbookRef: a release's tag names its own runbook; anything else,
// main's. The chart's prometheusrule.yaml has the same rule
// (TestRunbookURLsNameTheRelease in charts).
func TestRunbookRef(t *testing.T) {
	for version, want := range map[string]string{
		"v1.2.3": "v1.2.3", "v1.3.0-rc.1": "v1.3.0-rc.1", "v0.0.0-test.1": "v0.0.0-test.1",
		"v1.2.3-4-gabcdef0": "main", "abcdef0": "main", "dev": "main",
	} {
		if got := runbookRef(version); got != want {
			t.Errorf("runbookRef(%q) = %q, want %q", version, got, want)
		}
	}
}
