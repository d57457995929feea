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

// Package realnode runs a real Kubernetes node on this machine for the
// tests: Debian's containerd and runc, a kubelet built from source
// (hack/install-k8s-binaries.sh), the CNI bridge plugin on a subnet of its
// own, and images imported from OCI archives, with no registry, or pulled
// from one a test serves on loopback (TrustRegistry). Pods run for
// real: their containers are processes, their probes real HTTP requests,
// their logs files the kubelet serves to kubectl logs.
//
// A node changes the host: it needs root, mounts, cgroups, a bridge and
// sysctls. Everything it changes is recorded before (host.go) and put back
// by Stop, or, if the run crashed, by the next Start.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// Name is the Node's name. The kubelet listens on loopback only, and the
// API server (started with --kubelet-preferred-address-types=Hostname
// first, see APIServerFlags) reaches it by this name for kubectl logs.
const Name = "localhost"

// APIServerFlags are what kube-apiserver needs for a node:
//
//   - reaching the kubelet by its hostname rather than an address the node
//     may report;
//   - calling webhooks named by a Service (the Bar CRD's conversion webhook)
//     at a Ready Pod of the Service rather than at its ClusterIP. It stands
//     in for kube-proxy, which this node does not run, for the API server's
//     own webhook calls. buildServiceResolver
//     (k8s.io/kubernetes/cmd/kube-apiserver/app/server.go) picks
//     NewClusterIPServiceResolver by default, whose address no kube-proxy
//     translates here (without the flag, the API server's connections to
//     it reached an unrelated HTTPS proxy of the machine, whose certificate
//     it refused); with the flag, NewEndpointServiceResolver, which takes
//     a random Ready endpoint from the Service's EndpointSlices (written by
//     kube-controller-manager) for each request: a Pod IP on the bridge,
//     which this machine reaches. The TLS server name stays
//     <service>.<namespace>.svc (ClientManager.hookClientConfig in
//     k8s.io/apiserver/pkg/util/webhook/client.go), as in any cluster.
var APIServerFlags = []string{
	"--kubelet-preferred-address-types=Hostname,InternalIP",
	"--enable-aggregator-routing=true",
}

// Options configure a node.
type Options struct {
	// Cluster is the control plane to join; it must run
	// kube-controller-manager and kube-scheduler.
	Cluster *localcluster.Cluster
	// BinDir holds the kubelet; empty means $KUBE_BIN_DIR.
	BinDir string
	// Subnet is the Pods' network; it must not be in use on this machine.
	Subnet string
	// ServiceIP is the cluster's "kubernetes" Service IP: the first
	// address of kube-apiserver's --service-cluster-ip-range.
	ServiceIP string
	// WorkDir receives the image archives Start builds, and the logs of
	// containerd and the kubelet (in WorkDir/node-logs), which outlive
	// the node for a look after a failure.
	WorkDir string
}

// Node is a running node. Stop it when done.
type Node struct {
	LogDir string

	procs []*localcluster.Process
	fwd   *forwarder
}

// Missing lists what this machine lacks to run a node; empty means a node
// can start. hack/install-node-deps.sh installs the packages as root.
func Missing(binDir string) []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (a node mounts, makes cgroups and a bridge)")
	}
	if binDir == "" {
		binDir = os.Getenv(localcluster.BinDirEnv)
	}
	if _, err := os.Stat(filepath.Join(binDir, "kubelet")); err != nil {
		missing = append(missing, "kubelet in $"+localcluster.BinDirEnv+" (hack/install-k8s-binaries.sh)")
	}
	for _, c := range []string{"containerd", "runc", "ctr"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c+" (hack/install-node-deps.sh)")
		}
	}
	if cniBinDir() == "" {
		missing = append(missing, "CNI plugins bridge, host-local, loopback (hack/install-node-deps.sh)")
	}
	return missing
}

func cniBinDir() string {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		ok := true
		for _, p := range []string{"bridge", "host-local", "loopback"} {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

// Start cleans up after any earlier run, sets the host up, starts
// containerd and the kubelet, and returns once the Node is Ready.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if m := Missing(opts.BinDir); len(m) > 0 {
		return nil, fmt.Errorf("cannot start a node, missing: %v", m)
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir = os.Getenv(localcluster.BinDirEnv)
	}
	netw, err := newNetwork(opts.Subnet, opts.ServiceIP)
	if err != nil {
		return nil, err
	}
	if err := cleanHost(); err != nil {
		return nil, fmt.Errorf("cleaning up after an earlier node: %w", err)
	}
	if err := saveHostState(); err != nil {
		return nil, err
	}
	n := &Node{LogDir: filepath.Join(opts.WorkDir, "node-logs")}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	for _, d := range []string{n.LogDir, cniConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := makeCgroups(); err != nil {
		return nil, err
	}
	if err := netw.createBridge(); err != nil {
		return nil, fmt.Errorf("bridge %s: %w", bridgeName, err)
	}
	api, err := url.Parse(opts.Cluster.Server)
	if err != nil {
		return nil, err
	}
	if n.fwd, err = startForwarder(net.JoinHostPort(netw.ServiceIP.String(), "443"), api.Host); err != nil {
		return nil, err
	}

	pause, err := BuildArchive(opts.WorkDir, PauseImage)
	if err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx, netw); err != nil {
		return nil, err
	}
	if err := n.Import(ctx, pause); err != nil {
		return nil, err
	}
	if err := n.startKubelet(ctx, binDir, opts.Cluster); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) startContainerd(ctx context.Context, netw network) error {
	cfg, err := containerdConfig("docker.io/"+PauseImage.Ref, cniBinDir())
	if err != nil {
		return err
	}
	cni, err := cniConfig(netw)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(BaseDir, "containerd.toml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cniConfDir, "10-bar-realnode.conflist"), cni, 0o644); err != nil {
		return err
	}
	p, err := localcluster.StartProcess("containerd", "containerd", filepath.Join(n.LogDir, "containerd.log"), nil, "--config", cfgPath)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return p.WaitReady(ctx, time.Minute, func(ctx context.Context) error {
		return exec.CommandContext(ctx, "ctr", "--address", containerdSocket, "version").Run()
	})
}

func (n *Node) startKubelet(ctx context.Context, binDir string, c *localcluster.Cluster) error {
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		return err
	}
	var ports []int
	for _, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		ports = append(ports, port)
	}
	cfg, err := kubeletConfig(ports[0], ports[1])
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(BaseDir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	p, err := localcluster.StartProcess("kubelet", filepath.Join(binDir, "kubelet"), filepath.Join(n.LogDir, "kubelet.log"), nil,
		"--config="+cfgPath,
		// The admin identity: the test control plane runs no Node
		// authorizer and no certificate signer for a kubelet of its own.
		"--kubeconfig="+c.Kubeconfig,
		"--root-dir="+filepath.Join(BaseDir, "kubelet"),
		"--hostname-override="+Name,
		"--v=1")
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	return p.WaitReady(ctx, 2*time.Minute, func(ctx context.Context) error {
		node, err := client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node not Ready")
	})
}

// Stop stops the kubelet, the Pods' containers, containerd and its shims,
// and restores the host. It is safe to call twice.
func (n *Node) Stop() error {
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].Stop(10 * time.Second)
	}
	n.procs = nil
	if n.fwd != nil {
		n.fwd.Close()
	}
	// Containers and shims outlive the kubelet and containerd by design
	// (a node's workloads survive a restart of either); here they must go.
	// cleanHost kills what is left, by pid.
	var err error
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err = cleanHost()
		return err == nil, nil
	})
	return err
}
