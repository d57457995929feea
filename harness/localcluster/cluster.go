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

// Package localcluster starts a real Kubernetes control plane from the
// binaries hack/install-k8s-binaries.sh builds: etcd and kube-apiserver,
// optionally kube-controller-manager, kube-scheduler and kwok (simulated
// nodes, so Pods are scheduled and become Ready without a container runtime).
// Everything listens on 127.0.0.1 on free ports and lives under one
// directory. The integration tests and "make run" both use it.
package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BinDirEnv names the environment variable that points at the binaries.
// The Makefile sets it from hack/install-k8s-binaries.sh.
const BinDirEnv = "KUBE_BIN_DIR"

// Options choose what to start.
type Options struct {
	// BinDir holds the binaries; empty means $KUBE_BIN_DIR.
	BinDir string
	// Dir receives data, certificates, kubeconfig and logs. It must exist.
	Dir string
	// ControllerManager starts kube-controller-manager (garbage collector,
	// Deployment and ReplicaSet controllers, service accounts, ...).
	ControllerManager bool
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// KwokStages, if set, starts kwok with these Stage files; it then plays
	// the kubelet for nodes annotated kwok.x-k8s.io/node=fake (see AddNode).
	KwokStages []string
	// APIServerFlags are appended to kube-apiserver's command line.
	APIServerFlags []string
	// CRDs are files or directories of CustomResourceDefinitions to install
	// once the API server is up, before the other components start: the
	// garbage collector then watches them from its first discovery instead
	// of after its next rediscovery, up to 30 seconds later.
	CRDs []string
	// AuditLog makes the API server log every write, with its user, to
	// Cluster.AuditLog (see Cluster.Writes).
	AuditLog bool
}

// Cluster is a running control plane. Stop it when done.
type Cluster struct {
	Dir string
	// Kubeconfig is an admin (system:masters) kubeconfig file.
	Kubeconfig string
	// Config is the same admin identity as a client configuration.
	Config *rest.Config
	// Server is the API server URL.
	Server string
	// ServiceAccountKey is the private key that signs service account tokens.
	ServiceAccountKey string
	// AuditLog is the API server's audit log, if Options.AuditLog was set.
	AuditLog string
	// EtcdURL is etcd's client URL, for tests that check what the API
	// server stored (see StoredAPIVersions).
	EtcdURL string

	binDir string
	procs  []*Process // in start order
}

// Start brings the control plane up and returns when the API server is
// ready (and the other components are healthy). On error everything
// already started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	binDir := opts.BinDir
	if binDir == "" {
		binDir = os.Getenv(BinDirEnv)
	}
	if binDir == "" {
		return nil, fmt.Errorf("no binary directory: set $%s (make test and make run do) to the output of hack/install-k8s-binaries.sh", BinDirEnv)
	}
	c := &Cluster{Dir: opts.Dir, binDir: binDir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	logDir := filepath.Join(c.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	addrs, err := FreeAddrs(6)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		ports = append(ports, p)
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]

	if err := c.startEtcd(ctx, logDir, etcdPort, peerPort); err != nil {
		return nil, err
	}
	apiFlags := opts.APIServerFlags
	if opts.AuditLog {
		c.AuditLog = filepath.Join(logDir, "audit.log")
		flags, err := auditFlags(c.Dir, c.AuditLog)
		if err != nil {
			return nil, err
		}
		apiFlags = slices.Concat(flags, apiFlags)
	}
	if err := c.startAPIServer(ctx, logDir, etcdPort, apiPort, apiFlags); err != nil {
		return nil, err
	}
	for _, crds := range opts.CRDs {
		if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", crds); err != nil {
			return nil, err
		}
		if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds); err != nil {
			return nil, err
		}
	}
	common := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
	}
	if opts.ControllerManager {
		args := func(port int) []string {
			return slices.Concat(common, []string{"--secure-port=" + strconv.Itoa(port), "--controllers=*",
				"--service-account-private-key-file=" + c.ServiceAccountKey,
				"--root-ca-file=" + filepath.Join(c.Dir, "certs", "apiserver.crt")})
		}
		if err := c.startHealthChecked(ctx, logDir, "kube-controller-manager", kcmPort, args); err != nil {
			return nil, err
		}
	}
	if opts.Scheduler {
		args := func(port int) []string { return slices.Concat(common, []string{"--secure-port=" + strconv.Itoa(port)}) }
		if err := c.startHealthChecked(ctx, logDir, "kube-scheduler", schedPort, args); err != nil {
			return nil, err
		}
	}
	if len(opts.KwokStages) > 0 {
		if err := c.startKwok(ctx, logDir, kwokPort, opts.KwokStages); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Stop stops the components, newest first, so none of them sees its
// dependencies vanish while still running. It is safe to call twice.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop(10 * time.Second)
	}
	c.procs = nil
}

// Kubectl runs the kubectl binary as the admin and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	path, err := findBinary(c.binDir, "kubectl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// Processes describes the running components, for people: name and log path.
func (c *Cluster) Processes() [][2]string {
	var out [][2]string
	for _, p := range c.procs {
		out = append(out, [2]string{p.Name, p.LogPath})
	}
	return out
}

func (c *Cluster) start(logDir, name string, args ...string) (*Process, error) {
	path, err := findBinary(c.binDir, name)
	if err != nil {
		return nil, err
	}
	p, err := StartProcess(name, path, filepath.Join(logDir, name+".log"), nil, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

func (c *Cluster) startEtcd(ctx context.Context, logDir string, port, peerPort int) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	c.EtcdURL = client
	p, err := c.start(logDir, "etcd",
		"--name=bar-test",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-cluster=bar-test=http://127.0.0.1:%d", peerPort),
		// Tests churn little data; keep the fsyncs low. The quota is a
		// bound, not a size: make bench N=50000 writes and deletes a few
		// hundred MB of revisions per run, faster than the API server's
		// compaction (every 5 minutes) frees them.
		"--unsafe-no-fsync",
		"--quota-backend-bytes=8589934592",
	)
	if err != nil {
		return err
	}
	return p.WaitReady(ctx, time.Minute, httpCheck(http.DefaultClient, client+"/health", ""))
}

func (c *Cluster) startAPIServer(ctx context.Context, logDir string, etcdPort, port int, extra []string) error {
	certDir := filepath.Join(c.Dir, "certs")
	saKey, saPub, err := writeServiceAccountKeys(c.Dir)
	if err != nil {
		return err
	}
	c.ServiceAccountKey = saKey
	token, err := randomToken()
	if err != nil {
		return err
	}
	tokens := filepath.Join(c.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	args := append([]string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + certDir,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		// As hardened clusters (OpenShift among them) do: setting
		// blockOwnerDeletion on an ownerReference then needs "update" on
		// the owner's finalizers, which artifacts/install grants.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
		"--service-cluster-ip-range=10.0.0.0/24",
		// The "kubernetes" Service endpoints cannot point at a loopback
		// address, and nothing needs them here.
		"--endpoint-reconciler-type=none",
	}, extra...)
	p, err := c.start(logDir, "kube-apiserver", args...)
	if err != nil {
		return err
	}
	c.Server = fmt.Sprintf("https://127.0.0.1:%d", port)
	// The API server writes its self-signed serving certificate at start;
	// until then only an unverified probe can ask whether it is up.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := p.WaitReady(ctx, 2*time.Minute, httpCheck(insecure, c.Server+"/readyz", token)); err != nil {
		return err
	}
	return c.writeKubeconfig(token)
}

func (c *Cluster) startHealthChecked(ctx context.Context, logDir, name string, port int, args func(port int) []string) error {
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return c.startOnFreePort(ctx, logDir, name, port, args, func(port int) func(context.Context) error {
		return httpCheck(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), "")
	})
}

func (c *Cluster) startKwok(ctx context.Context, logDir string, port int, stages []string) error {
	args := func(port int) []string {
		return c.kwokArgs(port, stages)
	}
	return c.startOnFreePort(ctx, logDir, "kwok", port, args, func(port int) func(context.Context) error {
		return httpCheck(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), "")
	})
}

func (c *Cluster) kwokArgs(port int, stages []string) []string {
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotation + "=fake",
		// Fake Pod IPs; bookkeeping only, nothing is ever sent to them.
		"--cidr=10.0.0.1/24",
		"--node-ip=10.0.0.1",
		"--node-lease-duration-seconds=40",
		fmt.Sprintf("--server-address=127.0.0.1:%d", port),
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	return args
}

func (c *Cluster) writeKubeconfig(token string) error {
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	rc, err := c.WriteKubeconfig(c.Kubeconfig, token)
	if err != nil {
		return err
	}
	c.Config = rc
	return nil
}

// WriteKubeconfig writes a kubeconfig for this API server (verified with
// its serving certificate) that authenticates with token, and returns the
// same as a client configuration. The tests use it for service account
// tokens from the TokenRequest API.
func (c *Cluster) WriteKubeconfig(path, token string) (*rest.Config, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthority: filepath.Join(c.Dir, "certs", "apiserver.crt")}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user", Namespace: "default"}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return nil, err
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// httpCheck returns a readiness check: GET url answers 200.
func httpCheck(client *http.Client, url, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

func writeServiceAccountKeys(dir string) (keyPath, pubPath string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyPath, pubPath = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", "", err
	}
	return keyPath, pubPath, nil
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
