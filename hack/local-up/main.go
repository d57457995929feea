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

// Command local-up is "make run": it starts a local control plane with
// simulated nodes (harness/localcluster), runs the bar-controller binary
// against it out of cluster, applies the example Bar, shows it converge, and
// keeps everything running until Ctrl-C or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/conversion"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

func main() {
	binDir := flag.String("bin-dir", os.Getenv(localcluster.BinDirEnv), "Directory with etcd, kube-apiserver, ..., kubectl and kwok (the output of hack/install-k8s-binaries.sh).")
	controller := flag.String("controller", "bin/bar-controller", "The bar-controller binary to run.")
	dir := flag.String("dir", "_output/local", "Directory for data, certificates, kubeconfig and logs; wiped at start.")
	nodes := flag.Int("nodes", 1, "Number of simulated nodes.")
	example := flag.String("example", "artifacts/examples/example-bar.yaml", "Manifest to apply once everything runs.")
	timeout := flag.Duration("timeout", 2*time.Minute, "How long the example may take to converge.")
	flag.Parse()

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// From now on a second Ctrl-C kills this program at once; the
		// components die with it (Pdeathsig), just less politely.
		stopSignals()
	}()
	// Arguments after "--" go to bar-controller: make run ARGS=--trace=default/example.
	err := run(ctx, *binDir, *controller, flag.Args(), *dir, *example, *nodes, *timeout)
	switch {
	case err != nil && ctx.Err() != nil:
		// err is only the interruption seen from wherever start-up was.
		fmt.Fprintln(os.Stderr, "==> Interrupted during start-up; stopped everything that had started.")
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "\nERROR: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("==> Stopped cleanly: every process started here has exited.")
}

func run(ctx context.Context, binDir, controllerBin string, controllerArgs []string, dir, example string, nodes int, timeout time.Duration) error {
	start := time.Now()
	if binDir == "" {
		return errors.New("no --bin-dir: hack/install-k8s-binaries.sh did not print one (see its output above); make run passes it")
	}
	if _, err := os.Stat(filepath.Join("artifacts", "crd")); err != nil {
		return fmt.Errorf("run this from the repository root (make run): %w", err)
	}
	if _, err := exec.LookPath(controllerBin); err != nil {
		return fmt.Errorf("bar-controller binary: %w (make build creates bin/bar-controller)", err)
	}
	// Absolute, because the kubeconfig names its CA file by this path and
	// the user will read it from anywhere.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	// The previous run's etcd data and certificates would only get in the way.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stages, err := localcluster.KwokStages(".")
	if err != nil {
		return err
	}

	fmt.Printf("==> Starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from %s\n    data and logs: %s\n", binDir, dir)
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		BinDir: binDir, Dir: dir, ControllerManager: true, Scheduler: true, KwokStages: stages,
		// Installed before kube-controller-manager starts, so its garbage
		// collector knows Bars from the beginning.
		CRDs: []string{filepath.Join("artifacts", "crd")},
	})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		cluster.Stop()
		fmt.Printf("==> Stopped etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok; logs kept in %s\n", filepath.Join(dir, "logs"))
	}()
	fmt.Printf("    API server %s ready after %s\n", cluster.Server, since(start))
	for i := range nodes {
		if err := cluster.AddNode(ctx, fmt.Sprintf("kwok-node-%d", i)); err != nil {
			return fmt.Errorf("adding a simulated node: %w", err)
		}
	}

	// Its defaults, :8443 and :8081 on every interface, may be taken or
	// exposed; loopback ports picked here are neither. Metrics are plain
	// HTTP here, so that curl needs no token (the exercises scrape them);
	// ARGS=--metrics-secure=true turns the in-cluster default back on.
	addrs, err := localcluster.FreeAddrs(3)
	if err != nil {
		return err
	}
	metrics, health, webhook := addrs[0], addrs[1], addrs[2]
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	if err := localWebhook(ctx, kube, apiextensionsclient.NewForConfigOrDie(cluster.Config), webhook); err != nil {
		return err
	}
	args := append([]string{"--kubeconfig=" + cluster.Kubeconfig, "--v=2",
		"--metrics-bind-address=" + metrics, "--metrics-secure=false", "--health-probe-bind-address=" + health,
		"--conversion-webhook-bind-address=" + webhook,
		"--conversion-webhook-secret=" + conversion.InstallNamespace + "/" + conversion.SecretName,
		"--conversion-webhook-cert-names=127.0.0.1"}, controllerArgs...)
	ctrl := &controllerRun{binary: controllerBin, logDir: filepath.Join(dir, "logs"), args: args, readyz: "http://" + health + "/readyz"}
	if err := ctrl.start(ctx); err != nil {
		return err
	}
	defer ctrl.stop()
	fmt.Printf("    ready (the CRD trusts its conversion webhook's certificate) after %s; metrics http://%s/metrics, probes http://%s/readyz, conversion webhook https://%s%s\n",
		since(start), metrics, health, webhook, conversion.Path)
	toggle := readEnters()

	out, err := cluster.Kubectl(ctx, "apply", "-f", example)
	if err != nil {
		return err
	}
	fmt.Printf("==> kubectl apply -f %s: %s", example, out)

	bars := clientset.NewForConfigOrDie(cluster.Config)
	applied := time.Now()
	deadline := time.After(timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastSig string
	converged := false
	for {
		// Report on every change rather than on every transition: a scale
		// can be complete by the next poll, without an unconverged one.
		sig, summary, conv, err := observe(ctx, kube, bars)
		if err != nil && ctx.Err() == nil {
			fmt.Printf("    (reading state: %v)\n", err)
		}
		if sig != lastSig {
			lastSig = sig
			show(ctx, cluster)
			switch {
			case conv && !converged:
				fmt.Printf("==> CONVERGED (%s): Deployment created, all Pods Ready, status.availableReplicas == spec.replicas, %s after apply (%s since start)\n",
					summary, since(applied), since(start))
				printHelp(cluster.Kubeconfig, binDir, ctrl.logPath())
				converged = true
			case conv:
				fmt.Printf("==> converged (%s)\n", summary)
			case converged:
				fmt.Printf("    converging (%s)\n", summary)
			}
		}
		select {
		case <-ctx.Done():
			fmt.Println("\n==> Signal received: stopping bar-controller, then the control plane (Ctrl-C again kills at once)")
			return nil
		case <-ctrl.exited():
			return fmt.Errorf("bar-controller exited unexpectedly (%v)%s", ctrl.proc.State(), ctrl.tail())
		case <-toggle:
			// Enter stops the controller, and Enter again starts a new
			// one, which lists everything afresh: the relist that
			// docs/informer-internals.md shows.
			if ctrl.proc != nil {
				ctrl.stop()
				fmt.Println("    (press Enter to start bar-controller again)")
			} else if err := ctrl.start(ctx); err != nil {
				return err
			}
		case <-deadline:
			if !converged {
				show(ctx, cluster)
				return fmt.Errorf("the example Bar did not converge within %s (status.availableReplicas never reached spec.replicas with Ready=True)%s", timeout, ctrl.tail())
			}
		case <-tick.C:
		}
	}
}

// observe returns a signature that changes whenever any Bar, Deployment or
// Pod in the namespace does (their resourceVersions; the AGE column makes
// kubectl's own output useless for that), and whether every Bar is done:
// its status describes its current spec, with all replicas available
// (which the Deployment counts only once its Pods are Ready).
func observe(ctx context.Context, kube kubernetes.Interface, bars clientset.Interface) (sig, summary string, converged bool, err error) {
	const ns = "default"
	barList, err := bars.BarcontrollerV1().Bars(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", false, err
	}
	converged = len(barList.Items) > 0
	var sums []string
	for _, b := range barList.Items {
		sig += b.ResourceVersion + " "
		ready := false
		for _, c := range b.Status.Conditions {
			ready = ready || (c.Type == "Ready" && c.Status == metav1.ConditionTrue)
		}
		want := int32(0)
		if b.Spec.Replicas != nil {
			want = *b.Spec.Replicas
		}
		sums = append(sums, fmt.Sprintf("bar/%s: %d/%d available", b.Name, b.Status.AvailableReplicas, want))
		converged = converged && ready && b.Status.ObservedGeneration == b.Generation && b.Status.AvailableReplicas == want
	}
	deps, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", false, err
	}
	for _, d := range deps.Items {
		sig += d.ResourceVersion + " "
	}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", false, err
	}
	for _, p := range pods.Items {
		sig += p.ResourceVersion + " "
	}
	if len(sums) == 0 {
		sums = []string{"no Bars"}
	}
	return sig, strings.Join(sums, ", "), converged, nil
}

func show(ctx context.Context, c *localcluster.Cluster) {
	out, err := c.Kubectl(ctx, "get", "bars,deployments,pods", "-o", "wide")
	if err != nil {
		if ctx.Err() == nil {
			fmt.Printf("    (%v)\n", err)
		}
		return
	}
	fmt.Printf("\n--- %s  kubectl get bars,deployments,pods -o wide\n%s", time.Now().Format("15:04:05"), out)
}

func printHelp(kubeconfig, binDir, controllerLog string) {
	kubectl := filepath.Join(binDir, "kubectl")
	fmt.Printf(`
The cluster is yours to play with (from another terminal):

  export KUBECONFIG=%s
  %s get bars,deployments,pods
  %s scale bar/example --replicas=5
  %s get bars.v1alpha1.barcontroller.dev -o yaml   # through the conversion webhook

bar-controller's log: %s
Press Enter to stop bar-controller, and Enter again to start a new one.
Press Ctrl-C to stop everything. Changes are shown below as they happen.
`, kubeconfig, kubectl, kubectl, kubectl, controllerLog)
}

// lockDir takes an exclusive lock next to dir, so a second "make run" in
// the same tree fails clearly instead of wiping the first one's data. The
// kernel drops the lock when this process exits, however it exits.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is in use by another make run (%v); stop that one first", dir, err)
	}
	return func() { f.Close() }, nil
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }
