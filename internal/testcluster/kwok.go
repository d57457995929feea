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

package testcluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// kwokStages are the Stage files, from the kwok module itself, that make
// kwok act like a fast kubelet: Nodes turn Ready and keep a lease, and Pods
// become Ready, complete and are deleted.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// KwokStages returns the paths of those Stage files in the module cache,
// read through the kwok wrapper module at repoRoot/hack/tools/kwok (the one
// hack/install-k8s-binaries.sh builds kwok from, so it is already there).
func KwokStages(repoRoot string) ([]string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	cmd.Dir = filepath.Join(repoRoot, "hack", "tools", "kwok")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locating the kwok module (run hack/install-k8s-binaries.sh kwok first): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	paths := make([]string, len(kwokStages))
	for i, s := range kwokStages {
		paths[i] = filepath.Join(dir, s)
	}
	return paths, nil
}
