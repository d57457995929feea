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
	"encoding/json"
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
// at the version pinned by the tools module at repoRoot/hack/tools (the one
// hack/install-tools.sh builds kwok from). It asks "go mod download" rather than "go list -m": the binary may
// have been built with another module cache, and go list only reports where
// a module already is, printing nothing when it is not there.
func KwokStages(repoRoot string) ([]string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kwok")
	cmd.Dir = filepath.Join(repoRoot, "hack", "tools")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("downloading the kwok module: %w: %s", err, strings.TrimSpace(string(stderr)))
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("reading go mod download's answer: %w", err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return nil, fmt.Errorf("downloading the kwok module: %q", mod.Error)
	}
	dir := mod.Dir
	paths := make([]string, len(kwokStages))
	for i, s := range kwokStages {
		paths[i] = filepath.Join(dir, s)
	}
	return paths, nil
}
