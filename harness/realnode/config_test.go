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
	"encoding/json"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func TestNetworkAddresses(t *testing.T) {
	for _, tc := range []struct {
		subnet, gateway, firstPod string
	}{
		{"10.88.77.0/24", "10.88.77.1", "10.88.77.10"},
		// A host address is masked to its subnet.
		{"10.88.77.5/24", "10.88.77.1", "10.88.77.10"},
		{"192.168.200.0/28", "192.168.200.1", "192.168.200.10"},
	} {
		n, err := newNetwork(tc.subnet, "10.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if n.Gateway.String() != tc.gateway || n.firstPodIP().String() != tc.firstPod {
			t.Errorf("%s: gateway %s, first Pod IP %s; want %s, %s", tc.subnet, n.Gateway, n.firstPodIP(), tc.gateway, tc.firstPod)
		}
	}
	if _, err := newNetwork("10.88.77.0/24", "not-an-ip"); err == nil {
		t.Error("a bad Service IP was accepted")
	}
}

// The Pod network may reach this machine and nothing else: no masquerade,
// no gateway role for the bridge, and one route, to the Service IP.
func TestCNIConfigKeepsPodsOnTheMachine(t *testing.T) {
	n, _ := newNetwork("10.88.77.0/24", "10.0.0.1")
	b, err := cniConfig(n)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type      string `json:"type"`
			Bridge    string `json:"bridge"`
			IsGateway bool   `json:"isGateway"`
			IPMasq    bool   `json:"ipMasq"`
			IPAM      struct {
				Routes []map[string]string `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 1 {
		t.Fatalf("%d plugins, want 1", len(conf.Plugins))
	}
	p := conf.Plugins[0]
	if p.Type != "bridge" || p.Bridge != bridgeName || p.IsGateway || p.IPMasq {
		t.Errorf("plugin %+v: want a bridge on %s, no gateway, no masquerade", p, bridgeName)
	}
	want := map[string]string{"dst": "10.0.0.1/32", "gw": "10.88.77.1"}
	if len(p.IPAM.Routes) != 1 || p.IPAM.Routes[0]["dst"] != want["dst"] || p.IPAM.Routes[0]["gw"] != want["gw"] {
		t.Errorf("routes %v, want only %v (no default route)", p.IPAM.Routes, want)
	}
}

func TestKubeletConfigListensOnLoopbackOnly(t *testing.T) {
	b, err := kubeletConfig(10250, 10248)
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("the kubelet would not read its configuration: %v", err)
	}
	if cfg.Kind != "KubeletConfiguration" || cfg.Address != "127.0.0.1" || cfg.HealthzBindAddress != "127.0.0.1" || cfg.ReadOnlyPort != 0 {
		t.Errorf("kind %q, address %q, healthz %q, read-only port %d: want a KubeletConfiguration on loopback with no read-only port",
			cfg.Kind, cfg.Address, cfg.HealthzBindAddress, cfg.ReadOnlyPort)
	}
	if cfg.CgroupRoot != "/"+cgroupName || cfg.CgroupDriver != "cgroupfs" {
		t.Errorf("cgroups %q with %q, want /%s with cgroupfs", cfg.CgroupRoot, cfg.CgroupDriver, cgroupName)
	}
}

func TestBridgeMACIsLocalUnicastFromTheGateway(t *testing.T) {
	n, err := newNetwork("10.88.77.0/24", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	mac := bridgeMAC(n.Gateway)
	if got, want := mac.String(), "0a:58:0a:58:4d:01"; got != want {
		t.Errorf("bridgeMAC(%s) = %s, want %s", n.Gateway, got, want)
	}
	// Locally administered (bit 1 of the first byte), not multicast (bit 0).
	if mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
		t.Errorf("%s is not a locally administered unicast MAC", mac)
	}
}
