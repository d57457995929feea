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

package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// TrustRegistry lets the node pull from the registry at host ("host:port")
// over plain HTTP: a registry a test serves on loopback, which containerd,
// in the host's network namespace, reaches there. It writes the registry's
// hosts.toml under the node's own directory (containerd's registry
// config_path, see containerdConfig), which containerd reads at each pull,
// so a registry started after the node is found too. Only loopback
// addresses are taken: nothing else should be spoken to without TLS.
func (n *Node) TrustRegistry(host string) error {
	cfg, err := hostsTOML(host)
	if err != nil {
		return err
	}
	dir := filepath.Join(registryConfigDir, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), cfg, 0o644)
}

// hostsTOML is containerd's hosts.toml for a registry on loopback that
// speaks plain HTTP.
func hostsTOML(host string) ([]byte, error) {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		return nil, fmt.Errorf("registry %q: %w", host, err)
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("registry %q: only a loopback address is trusted over plain HTTP", host)
	}
	server := "http://" + host
	return toml.Marshal(map[string]any{
		"server": server,
		"host":   map[string]any{server: map[string]any{"capabilities": []string{"pull", "resolve"}}},
	})
}

// ContentDigests returns the digests of every blob in containerd's content
// store, as the kubelet's namespace sees it: images imported or pulled,
// their manifests, configs and layers. A test asks it whether an image's
// bytes reached the node before and how.
func (n *Node) ContentDigests(ctx context.Context) (map[string]bool, error) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", containerdSocket, "--namespace", "k8s.io", "content", "ls", "--quiet").Output()
	if err != nil {
		return nil, fmt.Errorf("ctr content ls: %w", err)
	}
	digests := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		digests[d] = true
	}
	return digests, nil
}

// RemoveImage removes every name containerd's CRI namespace has for the
// image whose manifest or index has digest (the reference it was pulled
// by and the CRI's own sha256:<config> name), and waits for containerd's
// garbage collection to remove its blobs, so that the next Pod that runs
// it pulls it again. It returns the names removed.
func (n *Node) RemoveImage(ctx context.Context, digest string) ([]string, error) {
	ctr := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", containerdSocket, "--namespace", "k8s.io"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	out, err := ctr("images", "ls")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n")[1:] {
		// REF TYPE DIGEST SIZE PLATFORMS LABELS
		if f := strings.Fields(line); len(f) > 2 && f[2] == digest {
			names = append(names, f[0])
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	_, err = ctr(append([]string{"images", "rm", "--sync"}, names...)...)
	return names, err
}
