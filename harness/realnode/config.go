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
	"path/filepath"

	"github.com/pelletier/go-toml/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Every path below is under BaseDir, except the CNI plugins Debian ships.
var (
	containerdSocket = filepath.Join(BaseDir, "containerd.sock")
	cniConfDir       = filepath.Join(BaseDir, "cni", "net.d")
	podLogsDir       = filepath.Join(BaseDir, "pod-logs")
	// registryConfigDir is the CRI plugin's registry config_path: one
	// directory per registry host, holding its hosts.toml (registry.go).
	registryConfigDir = filepath.Join(BaseDir, "containerd", "certs.d")
)

// containerdConfig is containerd's configuration (version 2, containerd
// 1.6): everything private to the node, the CRI plugin for the kubelet.
func containerdConfig(sandboxImage, cniBinDir string) ([]byte, error) {
	return toml.Marshal(map[string]any{
		"version": 2,
		"root":    filepath.Join(BaseDir, "containerd", "root"),
		"state":   filepath.Join(BaseDir, "containerd", "state"),
		"grpc":    map[string]any{"address": containerdSocket},
		"plugins": map[string]any{
			// Its default is /opt/containerd, outside the node's directory.
			"io.containerd.internal.v1.opt": map[string]any{"path": filepath.Join(BaseDir, "containerd", "opt")},
			"io.containerd.grpc.v1.cri": map[string]any{
				// No registry: the sandbox image is imported like the others.
				"sandbox_image": sandboxImage,
				// No AppArmor on this machine kind.
				"disable_apparmor": true,
				// Root here may not lower oom_score_adj below its own, and
				// runc fails every sandbox that asks (-998) without this.
				"restrict_oom_score_adj": true,
				"stream_server_address":  "127.0.0.1",
				"stream_server_port":     "0",
				// Where a registry host's hosts.toml is looked up, at each
				// pull (TrustRegistry writes one); a host without one is
				// reached over HTTPS, as by default.
				"registry": map[string]any{"config_path": registryConfigDir},
				"cni": map[string]any{
					"bin_dir":      cniBinDir,
					"conf_dir":     cniConfDir,
					"max_conf_num": 1,
				},
				"containerd": map[string]any{
					"snapshotter":          "overlayfs",
					"default_runtime_name": "runc",
					"runtimes": map[string]any{"runc": map[string]any{
						"runtime_type": "io.containerd.runc.v2",
						"options": map[string]any{
							// The kubelet uses cgroupfs: no systemd here.
							"SystemdCgroup": false,
							"BinaryName":    "/usr/sbin/runc",
							"Root":          filepath.Join(BaseDir, "runc"),
						},
					}},
				},
			},
		},
	})
}

// cniConfig is the Pod network: a bridge on a subnet of its own, with no
// masquerade and no gateway, so that Pods reach this machine and each other
// and nothing else. Its one route sends the cluster's "kubernetes" Service
// IP to the bridge address, where the node answers it (see forward.go).
func cniConfig(n network) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       "bar-realnode",
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    bridgeName,
			"isGateway": false,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": filepath.Join(BaseDir, "cni", "ipam"),
				"ranges": [][]map[string]string{{{
					"subnet":     n.Subnet.String(),
					"rangeStart": n.firstPodIP().String(),
					"gateway":    n.Gateway.String(),
				}}},
				"routes": []map[string]string{{"dst": n.ServiceIP.String() + "/32", "gw": n.Gateway.String()}},
			},
		}},
	}, "", "  ")
}

// kubeletConfig is the kubelet's configuration for this machine kind:
// cgroup v1 with the cgroupfs driver under a cgroup of its own, nothing
// listening beyond loopback, thresholds loose enough for a shared disk.
func kubeletConfig(port, healthzPort int) ([]byte, error) {
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		// The kubelet refuses cgroup v1 unless told this; 1.37 still runs on it.
		FailCgroupV1: ptr.To(false),
		CgroupDriver: "cgroupfs",
		CgroupRoot:   "/" + cgroupName,
		FailSwapOn:   ptr.To(false),

		ContainerRuntimeEndpoint: "unix://" + containerdSocket,
		PodLogsDir:               podLogsDir,

		Address:            "127.0.0.1",
		Port:               int32(port),
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To(int32(healthzPort)),
		// The API server reaches the kubelet (for kubectl logs) with no
		// client certificate: the test control plane has no client CA.
		// The port is on loopback, for the duration of a test run.
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},

		// A shared test machine's disk is often fuller than the defaults
		// (10-15 % free) allow; evicting Pods would fail the tests for
		// reasons that are not theirs.
		EvictionHard: map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
			"nodefs.inodesFree": "1%",
		},
		// The imported images cannot be pulled again: never collect them.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
	}
	return yaml.Marshal(cfg)
}
