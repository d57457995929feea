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

// Package charts holds the tests of the Helm chart in bar-controller/:
// that its objects are artifacts/'s, as kubectl kustomize renders them,
// that helm lint passes, that its values schema refuses bad values, and
// (upgrade_test.go, on a real API server) that helm upgrade from the
// previous chart, helm uninstall and a reinstall leave every Bar and its
// Deployment untouched. They need helm ($HELM, make test-chart builds it
// from source) and kubectl ($KUBE_BIN_DIR); the upgrade test needs etcd
// and kube-apiserver there too.
package charts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/memory"
)

const chart = "bar-controller"

// tools returns helm and kubectl, skipping the test without them, or
// failing it when $BAR_REQUIRE_HELM says they must be there.
func tools(t *testing.T) (helm, kubectl string) {
	t.Helper()
	helm = os.Getenv("HELM")
	if helm == "" || os.Getenv(localcluster.BinDirEnv) == "" {
		if os.Getenv("BAR_REQUIRE_HELM") != "" {
			t.Fatalf("$HELM and $%s must name helm and the Kubernetes binaries' directory (make test-chart)", localcluster.BinDirEnv)
		}
		t.Skipf("needs $HELM and $%s: run make test-chart", localcluster.BinDirEnv)
	}
	return helm, filepath.Join(os.Getenv(localcluster.BinDirEnv), "kubectl")
}

func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// objects decodes a multi-document YAML stream into its objects, by
// kind/namespace/name.
func objects(t *testing.T, data []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		md, _ := obj["metadata"].(map[string]any)
		key := fmt.Sprintf("%s/%v/%v", obj["kind"], md["namespace"], md["name"])
		if _, dup := out[key]; dup {
			t.Fatalf("%s twice", key)
		}
		out[key] = obj
	}
}

// TestChartMatchesKustomize renders the chart with its default values and
// artifacts/ with kubectl kustomize, and requires the same objects, field
// for field, but for what Helm must do differently: the Namespace is
// Helm's (--create-namespace), and the CRD carries helm.sh/resource-policy
// so that an uninstall keeps the Bars, its admission policies too so that
// an upgrade that stops rendering the CRD (crds.install=false) keeps them. The same for namespaceScoped and
// artifacts/namespaced, in another namespace.
func TestChartMatchesKustomize(t *testing.T) {
	helm, kubectl := tools(t)
	for _, tc := range []struct {
		name, namespace, kustomization string
		set                            []string
	}{
		{"default", "bar-controller", "../artifacts", nil},
		// The overlay holds no CRD (a cluster's admin installs it once).
		{"namespaced", "bar-apps", "../artifacts/namespaced", []string{"namespaceScoped=true", "crds.install=false"}},
		// Nor does this one (a kustomization cannot reach artifacts/crd).
		{"sharded", "bar-controller", "../artifacts/sharded", []string{"shards=6", "replicas=3", "crds.install=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "bar-controller", chart, "--namespace", tc.namespace}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			rendered, err := run(t, helm, args...)
			if err != nil {
				t.Fatal(err)
			}
			got := objects(t, rendered)
			kustomized, err := run(t, kubectl, "kustomize", tc.kustomization)
			if err != nil {
				t.Fatal(err)
			}
			want := objects(t, kustomized)
			delete(want, "Namespace/<nil>/bar-controller")
			// The CRD and the policies that guard it and its Bars.
			for _, key := range []string{"CustomResourceDefinition/<nil>/bars.barcontroller.dev",
				"ValidatingAdmissionPolicy/<nil>/bars.barcontroller.dev", "ValidatingAdmissionPolicyBinding/<nil>/bars.barcontroller.dev",
				"ValidatingAdmissionPolicy/<nil>/crd-changes.barcontroller.dev", "ValidatingAdmissionPolicyBinding/<nil>/crd-changes.barcontroller.dev"} {
				obj, ok := got[key]
				if !ok {
					continue
				}
				md := obj["metadata"].(map[string]any)
				annotations, _ := md["annotations"].(map[string]any)
				if annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("%s is not kept on uninstall, or by an upgrade that stops rendering it: %v", key, annotations)
				}
				delete(annotations, "helm.sh/resource-policy")
				if len(annotations) == 0 {
					delete(md, "annotations")
				}
			}
			withoutHelmLabels(t, got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("helm template differs from kubectl kustomize %s (-kustomize +helm):\n%s", tc.kustomization, diff)
			}
		})
	}
}

// TestChartLints: helm lint, strict (warnings fail too).
func TestChartLints(t *testing.T) {
	helm, _ := tools(t)
	if out, err := run(t, helm, "lint", "--strict", chart); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestValuesSchema: values the controller cannot run with are refused at
// helm template (and so at install and upgrade), naming the value; good
// ones render.
func TestValuesSchema(t *testing.T) {
	helm, _ := tools(t)
	for _, tc := range []struct {
		set     []string
		wantErr string // "" for a values set that must render
	}{
		{[]string{"leaderElection.enabled=false", "replicas=1"}, ""},
		{[]string{"image.digest=sha256:" + strings.Repeat("0", 64)}, ""},
		{[]string{"namespaceScoped=true", "crds.install=false", "logging.format=json", "logging.verbosity=2", "metrics.enabled=false", "webhook.enabled=false"}, ""},
		// A namespaced release must not own the CRD: its webhook and
		// its policy's identity would be the tenant's namespace.
		{[]string{"namespaceScoped=true"}, "crds.install=false"},
		// The webhook's grant on the CRD under a name the cluster's own
		// CRD policy does not judge (issue 39, fourth review, m1).
		{[]string{"crds.install=false", "serviceAccount.name=ops-sa"}, "serviceAccount.name"},
		{[]string{"crds.install=false", "serviceAccount.name=ops-sa", "webhook.enabled=false"}, ""},
		{[]string{"replicas=0"}, "replicas"},
		{[]string{"leaderElection.enabled=false"}, "replicas"},
		{[]string{"image.digest=sha256:abc"}, "digest"},
		{[]string{"logging.format=yaml"}, "format"},
		{[]string{"metrics.port=70000"}, "port"},
		{[]string{"replica=3"}, "replica"},
		{[]string{"goMemLimit=lots"}, "goMemLimit"},
		{[]string{"goMemLimit="}, ""},
	} {
		args := []string{"template", "bar-controller", chart, "--namespace", "bar-controller"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := run(t, helm, args...)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.set, err)
		case tc.wantErr == "" && !bytes.Contains(out, []byte("kind: Deployment")):
			t.Errorf("%v: rendered no Deployment:\n%s", tc.set, out)
		case tc.wantErr != "" && err == nil:
			t.Errorf("%v: rendered, want the schema to refuse it", tc.set)
		case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("%v: %v, want an error naming %q", tc.set, err, tc.wantErr)
		}
	}
}

// TestGoMemLimitFollowsTheLimit: with goMemLimit empty (the default) or
// absent, the chart sets no GOMEMLIMIT and gives the container its own
// memory limit through the Downward API, from which the controller
// derives GOMEMLIMIT (internal/memory): so a lowered limits.memory lowers
// GOMEMLIMIT with it. Before, the schema required goMemLimit, and the
// default 920MiB stayed GOMEMLIMIT under a 512Mi limit, above it. A
// goMemLimit that is set is GOMEMLIMIT.
func TestGoMemLimitFollowsTheLimit(t *testing.T) {
	helm, _ := tools(t)
	for _, tc := range []struct {
		set        []string
		limit      string // limits.memory rendered
		goMemLimit string // GOMEMLIMIT rendered, "" for none
	}{
		{nil, "1Gi", ""},
		{[]string{"resources.limits.memory=512Mi"}, "512Mi", ""},
		{[]string{"resources.limits.memory=512Mi", "goMemLimit=null"}, "512Mi", ""},
		{[]string{"resources.limits.memory=512Mi", "goMemLimit=400MiB"}, "512Mi", "400MiB"},
	} {
		args := []string{"template", "bar-controller", chart, "--namespace", "bar-controller", "--show-only", "templates/deployment.yaml"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := run(t, helm, args...)
		if err != nil {
			t.Errorf("%v: %v", tc.set, err)
			continue
		}
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal(out, &d); err != nil {
			t.Fatalf("%v: %v", tc.set, err)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if q := c.Resources.Limits[corev1.ResourceMemory]; q.String() != tc.limit {
			t.Errorf("%v: limits.memory %s, want %s", tc.set, q.String(), tc.limit)
		}
		var goMemLimit string
		fromLimit := false
		for _, e := range c.Env {
			switch e.Name {
			case "GOMEMLIMIT":
				goMemLimit = e.Value
			case memory.LimitEnv:
				ref := e.ValueFrom
				fromLimit = ref != nil && ref.ResourceFieldRef != nil && ref.ResourceFieldRef.Resource == "limits.memory" &&
					(ref.ResourceFieldRef.ContainerName == "" || ref.ResourceFieldRef.ContainerName == c.Name) &&
					(ref.ResourceFieldRef.Divisor.IsZero() || ref.ResourceFieldRef.Divisor.Value() == 1)
			}
		}
		if goMemLimit != tc.goMemLimit {
			t.Errorf("%v: GOMEMLIMIT %q, want %q", tc.set, goMemLimit, tc.goMemLimit)
		}
		if !fromLimit {
			t.Errorf("%v: no %s from the container's limits.memory in bytes: %+v", tc.set, memory.LimitEnv, c.Env)
		}
	}
}

// TestCRDPolicyAdmitsTheRelease: the CRD's policy admits the caBundle
// writes of the release's own ServiceAccount, in whatever namespace it is
// installed, and no other (the template rewrites artifacts/admission's
// identity; a reformatted file would otherwise keep bar-controller's
// silently, and every caBundle write of a release elsewhere be refused).
func TestCRDPolicyAdmitsTheRelease(t *testing.T) {
	helm, _ := tools(t)
	for _, tc := range []struct{ ns, sa string }{{"bar-controller", ""}, {"ops", ""}, {"ops", "foo"}} {
		args := []string{"template", "bar-controller", chart, "--namespace", tc.ns}
		name := "bar-controller"
		if tc.sa != "" {
			args, name = append(args, "--set", "serviceAccount.name="+tc.sa), tc.sa
		}
		rendered, err := run(t, helm, args...)
		if err != nil {
			t.Fatal(err)
		}
		policy, ok := objects(t, rendered)["ValidatingAdmissionPolicy/<nil>/crd-changes.barcontroller.dev"]
		if !ok {
			t.Fatalf("namespace %s: no CRD policy rendered", tc.ns)
		}
		spec := policy["spec"].(map[string]any)
		var allowed []string
		for _, v := range spec["variables"].([]any) {
			if v := v.(map[string]any); v["name"] == "allowed" {
				allowed = append(allowed, v["expression"].(string))
			}
		}
		identity := "system:serviceaccount:" + tc.ns + ":" + name
		if want := "'" + identity + "'"; len(allowed) != 1 || allowed[0] != want {
			t.Errorf("namespace %s, ServiceAccount %s: the policy admits %q, want %s", tc.ns, name, allowed, want)
		}
		// The policy must judge the release's own identity: a
		// ServiceAccount it does not match patches the CRD unchecked
		// (issue 39, third review, m1).
		var match string
		for _, c := range spec["matchConditions"].([]any) {
			match += c.(map[string]any)["expression"].(string)
		}
		if !strings.Contains(match, "endsWith(':"+name+"')") && !strings.Contains(match, "== '"+identity+"'") {
			t.Errorf("namespace %s, ServiceAccount %s: the policy's matchConditions %q do not match the release's identity", tc.ns, name, match)
		}
	}
}

// withoutHelmLabels checks that Helm's recommended labels are on every
// object the chart rendered (not on its Pods: TestValues), as a release
// named bar-controller of the chart in the tree sets them, and removes
// them: they are all the chart adds to kustomize's objects.
func withoutHelmLabels(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	for key, obj := range objs {
		md := obj["metadata"].(map[string]any)
		l, _ := md["labels"].(map[string]any)
		for k, v := range map[string]string{"app.kubernetes.io/instance": "bar-controller", "app.kubernetes.io/version": "dev",
			"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "bar-controller-0.1.0"} {
			if l[k] != v {
				t.Errorf("%s: label %s is %v, want %s", key, k, l[k], v)
			}
			delete(l, k)
		}
		if len(l) == 0 {
			delete(md, "labels")
		}
	}
}
