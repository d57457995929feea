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

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// controllerProcess is one bar-controller process.
type controllerProcess struct {
	*localcluster.Process
	metricsAddr string // host:port
	metricsURL  string // http://.../metrics
	healthURL   string // base of /healthz and /readyz
}

// startController runs bar-controller with the given kubeconfig and flags,
// and POD_NAME=name, which starts its leader-election identity. Cleanup
// stops it with SIGTERM, so a Lease it holds is released for the next test.
func startController(t *testing.T, name, kubeconfig string, args ...string) *controllerProcess {
	t.Helper()
	return startBinary(t, controllerBinary, name, kubeconfig, args...)
}

// startBinary is startController for another build of bar-controller: the
// upgrade test runs the previous release's binary too.
func startBinary(t *testing.T, binary, name, kubeconfig string, args ...string) *controllerProcess {
	t.Helper()
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	// Plain-HTTP metrics, which these tests scrape without a token, unless
	// args turn the default back on (a later flag wins).
	args = append([]string{"--kubeconfig=" + kubeconfig, "-v=2", "--metrics-secure=false",
		"--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1]}, args...)
	env := []string{"POD_NAME=" + name, "POD_NAMESPACE=",
		// Under -race the runtime sleeps 1 s before exiting, which would
		// show up in the shutdown times the tests measure.
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
	proc, err := localcluster.StartProcess(name, binary, filepath.Join(t.TempDir(), name+".log"), env, args...)
	if err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{Process: proc, metricsAddr: addrs[0], metricsURL: "http://" + addrs[0] + "/metrics", healthURL: "http://" + addrs[1]}
	t.Cleanup(func() {
		// A sync gets up to 30 s to finish after SIGTERM.
		if p.Stop(40*time.Second) && p.State().ExitCode() != 0 {
			t.Errorf("controller %s: %v after SIGTERM, want exit 0", name, p.State())
		}
		// The binary is built with -race when the tests are: any report
		// counts, however the process ended.
		if data, _ := os.ReadFile(p.LogPath); strings.Contains(string(data), "WARNING: DATA RACE") {
			t.Errorf("controller %s reported a data race, see %s", name, p.LogPath)
		}
		if t.Failed() {
			t.Logf("controller %s exited (%v)%s", name, p.State(), p.LogTail(40))
		}
	})
	return p
}

func (p *controllerProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatalf("signalling controller %s: %v", p.Name, err)
	}
}

// wait waits for the process to exit and returns how.
func (p *controllerProcess) wait(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.Exited():
		return p.State()
	case <-time.After(timeout):
		t.Fatalf("controller %s still running %s after being stopped", p.Name, timeout)
		return nil
	}
}

func (p *controllerProcess) log(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// probe returns the status code of GET healthURL+path, or 0 if the
// endpoint does not answer (yet).
func (p *controllerProcess) probe(path string) int {
	resp, err := httpClient.Get(p.healthURL + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitProbe waits until GET path answers want.
func (p *controllerProcess) waitProbe(t *testing.T, path string, want int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s to answer %d", p.Name, path, want), func(context.Context) (bool, error) {
		select {
		case <-p.Exited():
			return false, fmt.Errorf("controller %s exited: %v", p.Name, p.State())
		default:
		}
		return p.probe(path) == want, nil
	})
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads the controller's plain-HTTP /metrics.
func (p *controllerProcess) scrape(t *testing.T) localcluster.Metrics {
	t.Helper()
	m, err := localcluster.Scrape(httpClient, p.metricsURL, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}
