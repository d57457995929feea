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

package localcluster

import (
	"context"
	"strings"
	"testing"
)

func TestStartStop(t *testing.T) {
	// make test sets $BAR_REQUIRE_INTEGRATION: then a missing control
	// plane fails this test, as it does every other real-cluster test.
	SkipWithoutBinaries(t)
	ctx := context.Background()
	c, err := Start(ctx, Options{Dir: t.TempDir(), ControllerManager: true, Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	out, err := c.Kubectl(ctx, "get", "--raw=/readyz")
	if err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("readyz: %q, %v", out, err)
	}
	c.Stop()
	for _, p := range c.Processes() {
		t.Errorf("still running after Stop: %v", p)
	}
}

// No port is handed out twice in one process, however the kernel reuses
// released ones (TestCertKeeperConversionOnly once got its webhook's port
// again for its health probes from a second call).
func TestFreeAddrsNeverRepeat(t *testing.T) {
	seen := map[string]bool{}
	for i := range 300 {
		addrs, err := FreeAddrs(1 + i%3)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("call %d handed out %s again", i, a)
			}
			seen[a] = true
		}
	}
}
