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

// Package traces checks that the captures in docs/informer-traces.md and
// docs/exercises.md are what the code prints: it reruns their scenarios on a control plane of
// its own (a controller watching all namespaces, as the docs' does, would
// fight the other suites' controllers over their Bars) and compares.
package traces

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/harness/traces"
)

// TestCapturesMatchTheCode fails when the committed captures differ from a
// fresh run in what does not depend on timing (see harness/traces
// compare.go for what that is and why): a log message, call site or key
// that changed, a decision or a Deployment write that is new or gone.
// The fix is make traces, and a look at the prose around what changed.
func TestCapturesMatchTheCode(t *testing.T) {
	localcluster.SkipWithoutBinaries(t)
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Before the control plane: a document whose markers are broken
	// fails at once.
	docs := make([]string, len(traces.Documents))
	for i, d := range traces.Documents {
		text, err := os.ReadFile(filepath.Join(root, d.Path))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Committed(string(text)); err != nil {
			t.Fatal(err)
		}
		docs[i] = string(text)
	}
	dir := t.TempDir()
	controller, err := localcluster.BuildController(dir)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := traces.Run(t.Context(), traces.Options{Controller: controller, Root: root, Dir: dir,
		// Under -race the runtime sleeps a second before exiting; the
		// restarts here need not wait for it.
		Env:  []string{"GORACE=atexit_sleep_ms=0"},
		Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "bar-controller.*.log"))
	for _, log := range logs {
		if data, _ := os.ReadFile(log); strings.Contains(string(data), "WARNING: DATA RACE") {
			t.Errorf("bar-controller reported a data race:\n%s", data)
		}
	}
	for i, d := range traces.Documents {
		diff, err := d.Compare(docs[i], caps)
		if err != nil {
			t.Fatal(err)
		}
		if diff != "" {
			t.Errorf("the captures in %s no longer match what the code prints; run make traces and check the prose around them.\n"+
				"Compared: for logs, the syncs that wrote the Deployment in order, the last status write, and the lines of syncs and of informers as sets, "+
				"with resourceVersions, durations, queue depths and collapses left out; for kubectl tables, the columns but ages; "+
				"for metrics, the series' names and labels, not their values.\n\n%s", d.Path, diff)
		}
	}
}
