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
// rename, a restart and its relist, the relist at -v=6) on a local control
// plane with the given bar-controller binary, and rewrites the captures
// there. With --check it rewrites nothing and exits 1 if the document's
// captures differ from the fresh ones in what the drift test compares.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/barcontroller/bar-controller/internal/testcluster"
	"github.com/barcontroller/bar-controller/internal/traces"
)

func main() {
	binDir := flag.String("bin-dir", os.Getenv(testcluster.BinDirEnv), "Directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok (the output of hack/install-k8s-binaries.sh).")
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
		return fmt.Errorf("no --bin-dir and no $%s: make traces passes the output of hack/install-k8s-binaries.sh", testcluster.BinDirEnv)
	}
	if _, err := os.Stat(traces.DocPath); err != nil {
		return fmt.Errorf("run this from the repository root (make traces): %w", err)
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
	doc, err := os.ReadFile(traces.DocPath)
	if err != nil {
		return err
	}
	diff, err := traces.Compare(string(doc), caps)
	if err != nil {
		return err
	}
	if check {
		if diff != "" {
			return fmt.Errorf("the captures in %s no longer match what the code prints:\n%s", traces.DocPath, diff)
		}
		fmt.Printf("==> %s matches what the code prints (%s)\n", traces.DocPath, time.Since(start).Round(time.Second))
		return nil
	}
	out, err := traces.Rewrite(string(doc), caps)
	if err != nil {
		return err
	}
	if err := os.WriteFile(traces.DocPath, []byte(out), 0o644); err != nil {
		return err
	}
	if diff == "" {
		// The notes between the captures quote their numbers; a run that
		// changed nothing else may as well be dropped.
		fmt.Printf("==> rewrote the captures in %s; nothing changed but timing and resourceVersions (%s).\n"+
			"    The notes quote the old run's numbers: git checkout %s keeps it.\n", traces.DocPath, time.Since(start).Round(time.Second), traces.DocPath)
	} else {
		fmt.Printf("==> rewrote the captures in %s; these changed, check the prose around them:\n%s", traces.DocPath, diff)
	}
	fmt.Printf("    logs in %s\n", filepath.Join(dir, "logs"))
	return nil
}
