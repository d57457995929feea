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

// Command traces is "make traces": it reruns the scenarios of
// docs/informer-traces.md (a create, a scale the controller puts back, a
// rename, a restart and its relist, the relist at -v=6) and of
// docs/exercises.md (the Deployment deleted, a foreign Deployment in the
// Bar's way with what kubectl get bar -o wide and the Bar's Events show,
// the work queue's metrics) on a local control plane with the given
// bar-controller binary, and rewrites the captures in both documents. With
// --check it rewrites nothing and exits 1 if a document's captures differ
// from the fresh ones in what the drift test compares.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/harness/traces"
)

func main() {
	binDir := flag.String("bin-dir", os.Getenv(localcluster.BinDirEnv), "Directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok (the output of hack/install-k8s-binaries.sh).")
	controller := flag.String("controller", "bin/bar-controller", "The bar-controller binary to run.")
	dir := flag.String("dir", "_output/traces", "Directory for the control plane's data and the logs; wiped at start, kept after.")
	check := flag.Bool("check", false, "Compare only: print how the document's captures differ from the fresh ones and exit 1 if they do.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *controller, *dir, *check); err != nil {
		fmt.Fprintf(os.Stderr, "traces: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, binDir, controller, dir string, check bool) error {
	start := time.Now()
	if binDir == "" {
		return fmt.Errorf("no --bin-dir and no $%s: make traces passes the output of hack/install-k8s-binaries.sh", localcluster.BinDirEnv)
	}
	// Every document read before the control plane: a missing one or
	// broken markers fail at once, not after the run.
	docs := make([]string, len(traces.Documents))
	for i, d := range traces.Documents {
		text, err := os.ReadFile(d.Path)
		if err != nil {
			return fmt.Errorf("run this from the repository root (make traces): %w", err)
		}
		if _, err := d.Committed(string(text)); err != nil {
			return err
		}
		docs[i] = string(text)
	}
	controller, err := filepath.Abs(controller)
	if err != nil {
		return err
	}
	// Absolute, because the control plane's kubeconfig names files by it.
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	caps, err := traces.Run(ctx, traces.Options{BinDir: binDir, Controller: controller, Root: ".", Dir: dir,
		Logf: func(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }})
	if err != nil {
		return fmt.Errorf("%w\n(logs in %s)", err, filepath.Join(dir, "logs"))
	}
	var drift []string
	for i, d := range traces.Documents {
		diff, err := d.Compare(docs[i], caps)
		if err != nil {
			return err
		}
		if diff != "" {
			drift = append(drift, d.Path)
		}
		if check {
			if diff != "" {
				fmt.Printf("==> the captures in %s no longer match what the code prints:\n%s", d.Path, diff)
			}
			continue
		}
		out, err := d.Rewrite(docs[i], caps)
		if err != nil {
			return err
		}
		if err := os.WriteFile(d.Path, []byte(out), 0o644); err != nil {
			return err
		}
		if diff == "" {
			// The notes between the captures quote their numbers; a run that
			// changed nothing else may as well be dropped.
			fmt.Printf("==> rewrote the captures in %s; nothing changed in what test/traces compares.\n"+
				"    The notes quote the old run's numbers: git checkout %s keeps it.\n", d.Path, d.Path)
		} else {
			fmt.Printf("==> rewrote the captures in %s; these changed, check the prose around them:\n%s", d.Path, diff)
		}
	}
	if check {
		if len(drift) > 0 {
			return fmt.Errorf("captures drifted in %s", strings.Join(drift, ", "))
		}
		fmt.Printf("==> %d documents match what the code prints (%s)\n", len(traces.Documents), time.Since(start).Round(time.Second))
		return nil
	}
	fmt.Printf("==> done in %s\n", time.Since(start).Round(time.Second))
	fmt.Printf("    logs in %s\n", filepath.Join(dir, "logs"))
	return nil
}
