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
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestNotes: what helm install prints after installing (NOTES.txt), as a
// real API server's dry run renders it, says where the release runs and
// what it watches, the commands to wait for it and to make a first Bar
// (a file that exists), how the CRD is handled, and who may read the
// metrics, for the cluster-wide and the namespaced install.
func TestNotes(t *testing.T) {
	helmBin := requireHelm(t)
	requireControlPlane(t)
	cluster := startCluster(t)
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	createNamespace(t, kube, "bar-controller", nil)
	createNamespace(t, kube, "tenant", nil)
	helm := newHelm(t, helmBin, cluster.Kubeconfig)
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ns string
		set      []string
		want     []string
	}{
		{"cluster-wide", "bar-controller", nil, []string{
			"is installed in bar-controller: 2 replica(s), reconciling Bars in every namespace.",
			"kubectl -n bar-controller rollout status deployment/bar-controller",
			"The CRD is kept when the release is uninstalled",
			"https://bar-controller-metrics.bar-controller.svc:8443/metrics, for callers bound to the ClusterRole\nbar-controller-metrics-reader.",
		}},
		{"namespaced", "tenant", []string{"--set", "namespaceScoped=true,crds.install=false"}, []string{
			"is installed in tenant: 2 replica(s), reconciling the Bars of tenant only.",
			"kubectl -n tenant rollout status deployment/bar-controller",
			"kubectl apply -n tenant -f https://raw.githubusercontent.com/barcontroller/bar-controller/main/artifacts/examples/example-bar.yaml",
			"This release installs no CRD (crds.install=false)",
			"bar-controller-metrics-reader.tenant.",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := helm.output(t, append([]string{"install", "bar-controller", chart, "--namespace", tc.ns, "--dry-run=server"}, tc.set...)...)
			_, notes, ok := strings.Cut(out, "\nNOTES:\n")
			if !ok {
				t.Fatalf("helm install printed no notes:\n%s", out)
			}
			for _, want := range tc.want {
				if !strings.Contains(notes, want) {
					t.Errorf("the notes lack %q:\n%s", want, notes)
				}
			}
			// Every file of the repository the notes link to exists.
			for _, m := range regexp.MustCompile(`(?:github\.com/barcontroller/bar-controller/blob|raw\.githubusercontent\.com/barcontroller/bar-controller)/[^/]+/(\S+)`).FindAllStringSubmatch(notes, -1) {
				if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
					t.Errorf("the notes link to %s: %v", m[1], err)
				}
			}
		})
	}
}
