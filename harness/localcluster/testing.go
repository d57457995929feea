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
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// RequireEnv names the environment variable that makes a missing control
// plane a failure instead of a skip; make test sets it, so CI can never
// pass by skipping the real-cluster tests.
const RequireEnv = "BAR_REQUIRE_INTEGRATION"

// SkipWithoutBinaries skips t when there are no Kubernetes binaries to
// start a control plane from ($KUBE_BIN_DIR unset), or fails it if
// $BAR_REQUIRE_INTEGRATION says they must be there.
func SkipWithoutBinaries(t testing.TB) {
	t.Helper()
	if os.Getenv(BinDirEnv) != "" {
		return
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("$%s is not set, so there is no control plane to test against", BinDirEnv)
	}
	t.Skipf("real-cluster test: needs $%s; run make test", BinDirEnv)
}

// Eventually polls cond every 100 ms until it returns true, failing t if
// it returns an error or a minute passes.
func Eventually(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
