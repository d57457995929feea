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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestMakeRunServesConversion runs what make run runs (hack/local-up with
// this repository's controller) and reads the example Bar, which
// artifacts/examples writes in v1, back through v1alpha1, as the help text
// make run prints invites a learner to: the API server must call the
// controller's webhook on its loopback port, trusting its certificate,
// out of cluster. Then SIGTERM stops everything cleanly.
func TestMakeRunServesConversion(t *testing.T) {
	localcluster.SkipWithoutBinaries(t)
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	localUp := filepath.Join(t.TempDir(), "local-up")
	// With make run's flags: its compile is the controller's.
	build := exec.Command("go", "build", "-trimpath", "-o", localUp, "./hack/local-up")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/local-up: %v\n%s", err, out)
	}
	outPath := filepath.Join(t.TempDir(), "make-run.out")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// As make run: from the repository root (local-up reads artifacts/),
	// with a terminal's stdin that nobody types into (Enter would stop the
	// controller).
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	cmd := exec.Command(localUp, "--bin-dir="+os.Getenv(localcluster.BinDirEnv), "--controller="+controllerBinary,
		"--dir="+filepath.Join(t.TempDir(), "local"))
	cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = root, stdinR, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdinR.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	hasExited := false
	printed := func() string {
		b, _ := os.ReadFile(outPath)
		return string(b)
	}
	defer func() {
		if !hasExited {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("make run printed:\n%s", printed())
		}
	}()

	waitPrinted := func(what string, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !strings.Contains(printed(), what) {
			select {
			case err := <-exited:
				hasExited = true
				t.Fatalf("make run exited (%v) before printing %q", err, what)
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("make run did not print %q within %v", what, timeout)
			}
		}
	}
	// Three minutes here and one after SIGTERM below only bound a hang
	// (the control plane's start included); they claim nothing about
	// speed.
	waitPrinted("==> CONVERGED", 3*time.Minute)
	m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(printed())
	if m == nil {
		t.Fatal("make run printed no KUBECONFIG for the learner")
	}
	kubectl := filepath.Join(os.Getenv(localcluster.BinDirEnv), "kubectl")
	get := exec.Command(kubectl, "get", "bars.v1alpha1.barcontroller.dev", "example",
		"-o", "jsonpath={.apiVersion} {.spec.deploymentName} {.spec.image}")
	get.Env = append(os.Environ(), "KUBECONFIG="+m[1])
	got, err := get.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get bars.v1alpha1.barcontroller.dev example: %v\n%s", err, got)
	}
	// v1's spec.deployment.name and spec.template.image, where v1alpha1
	// has them, and the CRD's deprecation warning.
	for _, want := range []string{"barcontroller.dev/v1alpha1 example-nginx nginx:1.28.0", "barcontroller.dev/v1alpha1 Bar is deprecated"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("kubectl get in v1alpha1 printed %q, want %q", got, want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		hasExited = true
		if err != nil || !strings.Contains(printed(), "==> Stopped cleanly") {
			t.Errorf("make run after SIGTERM: %v, want exit 0 and \"Stopped cleanly\"", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("make run still running a minute after SIGTERM")
	}
}
