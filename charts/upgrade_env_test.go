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

package charts

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// egressProxy stands in for kube-proxy between kube-apiserver and the
// conversion webhook of a controller running on this machine. The API
// server is started with an egress selector whose "cluster" traffic (its
// calls to Services, webhooks among them) goes through this HTTP CONNECT
// proxy; it resolves the CRD's Service to its ClusterIP, as in any
// cluster, and asks for a tunnel to it, which the proxy opens to the one
// webhook there is. So the CRD keeps the clientConfig the chart gives it
// (the Service, and the caBundle the controller adds), and helm upgrade
// meets the object a real cluster would have, not one a test repointed
// at a URL.
type egressProxy struct {
	socket string // where the API server reaches the proxy
	to     string // the webhook's address

	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	targets map[string]int // CONNECT authority: tunnels asked for
	conns   []net.Conn
	closed  bool
}

func startEgressProxy(t *testing.T, to string) *egressProxy {
	t.Helper()
	// A Unix socket: kube-apiserver v1.37 dereferences the TLS
	// configuration of a TCP proxy even for http:// (a nil pointer panic
	// at start), and a socket needs none. Not in t.TempDir(), whose path
	// can pass the 108 bytes a socket's may have.
	dir, err := os.MkdirTemp("", "bar-egress-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "proxy.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	p := &egressProxy{socket: socket, to: to, ln: ln, targets: map[string]int{}}
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

// configFile writes the API server's egress selector configuration.
func (p *egressProxy) configFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "egress.yaml")
	config := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, p.socket)
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *egressProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.tunnel(c) })
	}
}

// track remembers a connection for close; false once closed.
func (p *egressProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *egressProxy) tunnel(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		fmt.Fprint(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	p.mu.Lock()
	p.targets[req.Host]++
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.to)
	if err != nil {
		fmt.Fprint(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	if !p.track(up) {
		return
	}
	defer up.Close()
	fmt.Fprint(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() {
		// What the client sent after the CONNECT (nothing, with TLS:
		// the client speaks once it has the 200) is in br.
		_, _ = io.Copy(up, br)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(c, up)
}

// tunnels returns the tunnels asked for so far, by target.
func (p *egressProxy) tunnels() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.targets))
	for k, v := range p.targets {
		out[k] = v
	}
	return out
}

func (p *egressProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// helmCLI runs helm against one cluster, with its cache, configuration
// and data in the test's own directories, so that nothing in $HOME is
// read or written.
type helmCLI struct {
	bin, kubeconfig string
	env             []string
}

func newHelm(t *testing.T, bin, kubeconfig string) helmCLI {
	t.Helper()
	home := t.TempDir()
	return helmCLI{bin: bin, kubeconfig: kubeconfig, env: []string{
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}}
}

// run runs helm, logs what it said and returns it; a failure fails the
// test.
func (h helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	out := h.output(t, args...)
	t.Logf("helm %s:\n%s", strings.Join(args, " "), out)
	return out
}

// output is run without the log, for what helm prints at length.
func (h helmCLI) output(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(h.bin, append(args, "--kubeconfig="+h.kubeconfig)...)
	cmd.Env = append(os.Environ(), h.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// controller is bar-controller in a process of its own, run the way the
// chart's Deployment runs it (leader election, the conversion webhook, the
// release's ServiceAccount and namespace), but on loopback ports.
type controller struct {
	*localcluster.Process
	metricsURL, healthURL string
}

// startController runs binary as name. Cleanup stops it with SIGTERM.
func startController(t *testing.T, binary, name, kubeconfig, namespace, webhookAddr string) *controller {
	t.Helper()
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + kubeconfig, "-v=2",
		"--leader-elect", "--leader-elect-lease-name=bar-controller",
		"--metrics-secure=false", "--metrics-bind-address=" + addrs[0],
		"--health-probe-bind-address=" + addrs[1],
		"--conversion-webhook-bind-address=" + webhookAddr}
	env := []string{"POD_NAME=" + name, "POD_NAMESPACE=" + namespace,
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
	proc, err := localcluster.StartProcess(name, binary, filepath.Join(t.TempDir(), name+".log"), env, args...)
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{Process: proc, metricsURL: "http://" + addrs[0] + "/metrics", healthURL: "http://" + addrs[1]}
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop stops the controller with SIGTERM, as the kubelet does, and fails
// the test if it exits badly or reported a data race. Safe to call twice.
func (c *controller) stop(t *testing.T) {
	t.Helper()
	// A sync gets up to 30 s to finish after SIGTERM.
	if c.Stop(40*time.Second) && c.State().ExitCode() != 0 {
		t.Errorf("controller %s: %v after SIGTERM, want exit 0%s", c.Name, c.State(), c.LogTail(40))
	}
	if data, _ := os.ReadFile(c.LogPath); strings.Contains(string(data), "WARNING: DATA RACE") {
		t.Errorf("controller %s reported a data race, see %s", c.Name, c.LogPath)
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// waitReady waits for /readyz: the webhook's certificate is in the
// Secret and the CRD's caBundle trusts it.
func (c *controller) waitReady(t *testing.T) {
	t.Helper()
	localcluster.Eventually(t, c.Name+" to be ready", func(context.Context) (bool, error) {
		select {
		case <-c.Exited():
			return false, fmt.Errorf("controller %s exited: %v%s", c.Name, c.State(), c.LogTail(40))
		default:
		}
		resp, err := httpClient.Get(c.healthURL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// waitIdle waits until the controller has synced at least n Bars since it
// started and its queue is empty. A sync is counted once it has returned,
// so every write of those syncs is done by then.
func (c *controller) waitIdle(t *testing.T, n int) {
	t.Helper()
	localcluster.Eventually(t, fmt.Sprintf("%s to sync %d Bars and go idle", c.Name, n), func(context.Context) (bool, error) {
		m, err := localcluster.Scrape(httpClient, c.metricsURL, "")
		if err != nil {
			return false, nil
		}
		synced, _ := m.Value("bar_controller_syncs_total", map[string]string{"result": "success"})
		depth, _ := m.Value("workqueue_depth", map[string]string{"name": "bars"})
		return synced >= float64(n) && depth == 0, nil
	})
}
