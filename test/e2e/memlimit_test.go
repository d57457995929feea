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
	"regexp"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The installed Deployment, as the API server has it after kubectl apply -k
// artifacts/: GOMEMLIMIT must leave the container headroom below its
// memory limit (see the comment at GOMEMLIMIT in
// artifacts/install/deployment.yaml), and not so much that the limit is
// mostly unused.
func TestInstalledGOMEMLIMITLeavesHeadroom(t *testing.T) {
	env, _ := setupOps(t)
	env.install(t)
	d, err := env.kube.AppsV1().Deployments(installNamespace).Get(t.Context(), "bar-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		limit, ok := c.Resources.Limits["memory"]
		if !ok {
			t.Errorf("container %s has no memory limit", c.Name)
			continue
		}
		found := false
		for _, e := range c.Env {
			if e.Name != "GOMEMLIMIT" {
				continue
			}
			found = true
			if e.ValueFrom != nil {
				t.Errorf("container %s: GOMEMLIMIT comes from %+v, which can only be the whole limit; want a value below it", c.Name, e.ValueFrom)
				continue
			}
			goLimit, err := parseGoMemLimit(e.Value)
			if err != nil {
				t.Errorf("container %s: %v", c.Name, err)
				continue
			}
			share := float64(goLimit) / float64(limit.Value())
			t.Logf("container %s: GOMEMLIMIT %s is %.1f%% of its memory limit %s", c.Name, e.Value, 100*share, limit.String())
			if share < 0.8 || share > 0.95 {
				t.Errorf("container %s: GOMEMLIMIT %s is %.1f%% of the memory limit %s, want 80-95%%", c.Name, e.Value, 100*share, limit.String())
			}
		}
		if !found {
			t.Errorf("container %s sets no GOMEMLIMIT", c.Name)
		}
	}
}

var goMemLimitRE = regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`)

// parseGoMemLimit reads GOMEMLIMIT as the Go runtime does (package
// runtime: a byte count with an optional B, KiB, MiB, GiB or TiB suffix).
func parseGoMemLimit(s string) (int64, error) {
	m := goMemLimitRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q is not a size the Go runtime reads", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, nil
}
