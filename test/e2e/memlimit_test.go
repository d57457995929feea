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
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/barcontroller/bar-controller/internal/memory"
)

// The shipped Deployments set no GOMEMLIMIT: each gives its container its
// own memory limit through the Downward API (memory.LimitEnv), and the
// binary sets GOMEMLIMIT to 90 % of it (internal/memory). A literal, as
// they had, stayed where it was when an operator changed the limit.

// TestInstalledGOMEMLIMITLeavesHeadroom: the installed Deployment, as the
// API server has it after kubectl apply -k artifacts/, gives its container
// its memory limit and no GOMEMLIMIT; the real binary, with that variable
// as the kubelet resolves it, runs with a GOMEMLIMIT that leaves the
// container headroom below its limit (80-95 %), and still does when the
// limit is lowered to 512Mi (the chart's and the manifests' old literal,
// 920MiB, was then above the limit).
func TestInstalledGOMEMLIMITLeavesHeadroom(t *testing.T) {
	env, ns := setupOps(t)
	env.install(t)
	d, err := env.kube.AppsV1().Deployments(installNamespace).Get(t.Context(), "bar-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if _, err := checkMemoryEnv(c); err != nil {
		t.Fatalf("container %s: %v", c.Name, err)
	}
	lowered := c.DeepCopy()
	lowered.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
	for _, c := range []*corev1.Container{&c, lowered} {
		limitQ := c.Resources.Limits[corev1.ResourceMemory]
		value, err := downwardMemoryLimit(c)
		if err != nil {
			t.Fatal(err)
		}
		// As the Pod's container would have it: the variable, and no
		// GOMEMLIMIT (empty is unset to the runtime and the binary).
		t.Setenv(memory.LimitEnv, value)
		t.Setenv("GOMEMLIMIT", "")
		p := startController(t, "memlimit-"+limitQ.String(), env.cluster.Kubeconfig, "--namespace="+ns)
		p.waitProbe(t, "/healthz", 200) // the limit is set before anything else, metrics served from the start
		got, ok := p.scrape(t).Value("go_gc_gomemlimit_bytes", nil)
		if !ok {
			t.Fatal("the controller exports no go_gc_gomemlimit_bytes")
		}
		want := memory.SoftLimit(limitQ.Value())
		share := got / float64(limitQ.Value())
		t.Logf("limits.memory %s (%s=%s): GOMEMLIMIT %.0f bytes, %.1f%% of it", limitQ.String(), memory.LimitEnv, value, got, 100*share)
		if int64(got) != want || share < 0.8 || share > 0.95 {
			t.Errorf("limits.memory %s: the controller runs with GOMEMLIMIT %.0f (%.1f%%), want %d, 80-95%% of the limit", limitQ.String(), got, 100*share, want)
		}
	}
}

// checkMemoryEnv checks that c sets no GOMEMLIMIT and gives the binary
// its own memory limit, in bytes, through the Downward API, and returns
// that limit.
func checkMemoryEnv(c corev1.Container) (int64, error) {
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return 0, fmt.Errorf("no memory limit")
	}
	found := false
	for _, e := range c.Env {
		switch e.Name {
		case "GOMEMLIMIT":
			return 0, fmt.Errorf("GOMEMLIMIT is set (%q, %+v): it would not follow limits.memory", e.Value, e.ValueFrom)
		case memory.LimitEnv:
			ref := e.ValueFrom
			if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" ||
				(ref.ResourceFieldRef.ContainerName != "" && ref.ResourceFieldRef.ContainerName != c.Name) {
				return 0, fmt.Errorf("%s is not this container's limits.memory: %+v", memory.LimitEnv, e)
			}
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s: the binary would not know the limit", memory.LimitEnv)
	}
	return limit.Value(), nil
}

// downwardMemoryLimit is the value the kubelet gives memory.LimitEnv in
// c: the limit divided by the reference's divisor (1 unless set),
// rounded up, as a decimal integer.
func downwardMemoryLimit(c *corev1.Container) (string, error) {
	for _, e := range c.Env {
		if e.Name != memory.LimitEnv || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil {
			continue
		}
		divisor := e.ValueFrom.ResourceFieldRef.Divisor
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		limit := c.Resources.Limits[corev1.ResourceMemory]
		return strconv.FormatInt(int64(math.Ceil(float64(limit.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("container %s has no %s from the Downward API", c.Name, memory.LimitEnv)
}

// manifestMemory reads a Deployment in artifacts/ as shipped and returns
// the GOMEMLIMIT its container runs with, as the binary derives it from
// its memory limit, and that limit, holding the two to the share
// TestInstalledGOMEMLIMITLeavesHeadroom holds the installed one's to
// (80-95%). The floods run a replica with that GOMEMLIMIT.
func manifestMemory(t *testing.T, path string) (goMemLimit string, limit int64) {
	t.Helper()
	var d appsv1.Deployment
	readManifest(t, filepath.Join(artifactsDir, path), &d)
	limit, err := checkMemoryEnv(d.Spec.Template.Spec.Containers[0])
	if err != nil {
		t.Fatalf("artifacts/%s: %v", path, err)
	}
	soft := memory.SoftLimit(limit)
	if share := float64(soft) / float64(limit); share < 0.8 || share > 0.95 {
		t.Errorf("artifacts/%s: GOMEMLIMIT %d is %.1f%% of the memory limit %d, want 80-95%%", path, soft, 100*share, limit)
	}
	return strconv.FormatInt(soft, 10), limit
}
