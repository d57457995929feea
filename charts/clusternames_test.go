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
	"strings"
	"testing"
)

// TestReleasesOwnTheirClusterRoles renders namespace-scoped releases side
// by side, as tenants install them: the same release name in two
// namespaces, and another name in a third, each with a Prometheus binding.
// No ClusterRole or ClusterRoleBinding may be rendered by two of them:
// Helm refuses to install an object another release owns, and uninstalling
// the owner deletes it from under the others (before, every namespaced
// release rendered the ClusterRole bar-controller-metrics-reader). Each
// binding's ClusterRole is its own release's, or the cluster's (system:).
// A cluster-wide release named otherwise than bar-controller names its
// cluster-scoped objects after itself too.
func TestReleasesOwnTheirClusterRoles(t *testing.T) {
	helm, _ := tools(t)
	owner := map[string]string{} // kind/name -> release/namespace
	for _, r := range []struct {
		name, namespace string
		set             []string
	}{
		{"bar-controller", "team-a", []string{"namespaceScoped=true", "crds.install=false"}},
		{"bar-controller", "team-b", []string{"namespaceScoped=true", "crds.install=false"}},
		{"tenant", "team-c", []string{"namespaceScoped=true", "crds.install=false"}},
		{"ops", "ops", []string{"crds.install=false"}},
	} {
		args := []string{"template", r.name, chart, "--namespace", r.namespace,
			"--set", "monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus",
			"--set", "monitoring.serviceMonitor.prometheusServiceAccount.namespace=monitoring",
			"--set", "monitoring.serviceMonitor.enabled=true"}
		for _, s := range r.set {
			args = append(args, "--set", s)
		}
		out, err := run(t, helm, args...)
		if err != nil {
			t.Fatal(err)
		}
		release := r.name + "/" + r.namespace
		mine := map[string]bool{}
		objs := objects(t, out)
		for key, obj := range objs {
			kind, _, _ := strings.Cut(key, "/")
			if kind != "ClusterRole" && kind != "ClusterRoleBinding" {
				continue
			}
			name := obj["metadata"].(map[string]any)["name"].(string)
			if other, ok := owner[kind+"/"+name]; ok {
				t.Errorf("%s %s is rendered by the releases %s and %s", kind, name, other, release)
			}
			owner[kind+"/"+name] = release
			if kind == "ClusterRole" {
				mine[name] = true
			}
		}
		for key, obj := range objs {
			if !strings.HasPrefix(key, "ClusterRoleBinding/") {
				continue
			}
			ref := obj["roleRef"].(map[string]any)["name"].(string)
			if !mine[ref] && !strings.HasPrefix(ref, "system:") {
				t.Errorf("release %s: %s binds the ClusterRole %s, which is not its own", release, key, ref)
			}
		}
	}
	for _, want := range []string{"ClusterRole/bar-controller-metrics-reader.team-a", "ClusterRole/tenant-bar-controller-metrics-reader.team-c",
		"ClusterRole/ops-bar-controller", "ClusterRole/ops-bar-controller-webhook", "ClusterRoleBinding/bar-controller-auth-delegator.team-b"} {
		if _, ok := owner[want]; !ok {
			t.Errorf("no %s rendered: %v", want, owner)
		}
	}
}
