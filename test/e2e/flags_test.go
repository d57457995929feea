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
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestProfilingNeedsSecureMetrics: the binary refuses to serve Go's
// profiles over plain HTTP to anyone, before it contacts any API server.
func TestProfilingNeedsSecureMetrics(t *testing.T) {
	localcluster.SkipWithoutBinaries(t)
	// 10 s bounds a hang: the flags are checked before anything else.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, controllerBinary, "--profiling", "--metrics-secure=false",
		"--kubeconfig=/nonexistent", "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=0").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("--profiling --metrics-secure=false: %v, want exit 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--profiling requires --metrics-secure") {
		t.Errorf("the error does not say why:\n%s", out)
	}
}
