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
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// The CRI plugin looks registries up under the node's own directory, and a
// trusted registry is reached over plain HTTP, for pulls, on loopback only.
func TestRegistryConfig(t *testing.T) {
	b, err := containerdConfig("docker.io/pause:test", "/usr/lib/cni")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins map[string]struct {
			Registry struct {
				ConfigPath string `toml:"config_path"`
			} `toml:"registry"`
		} `toml:"plugins"`
	}
	if err := toml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Plugins["io.containerd.grpc.v1.cri"].Registry.ConfigPath; got != BaseDir+"/containerd/certs.d" {
		t.Errorf("registry config_path %q, want it under %s", got, BaseDir)
	}

	b, err = hostsTOML("127.0.0.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	var hosts struct {
		Server string `toml:"server"`
		Host   map[string]struct {
			Capabilities []string `toml:"capabilities"`
		} `toml:"host"`
	}
	if err := toml.Unmarshal(b, &hosts); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		Capabilities []string `toml:"capabilities"`
	}{"http://127.0.0.1:5000": {Capabilities: []string{"pull", "resolve"}}}
	if hosts.Server != "http://127.0.0.1:5000" || !reflect.DeepEqual(hosts.Host, want) {
		t.Errorf("hosts.toml:\n%s\nwant server and host http://127.0.0.1:5000, pull and resolve only", b)
	}
	for _, bad := range []string{"10.88.77.1:5000", "registry.example:5000", "127.0.0.1"} {
		if _, err := hostsTOML(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("hostsTOML(%q) = %v, want a refusal naming it", bad, err)
		}
	}
}
