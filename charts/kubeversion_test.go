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
	"strings"
	"testing"
)

// TestKubeVersion: the chart installs on 1.30 and later only. Both
// installs ship admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies,
// which an API server serves as v1 from 1.30 (GA): before, the chart said
// 1.29, where helm install passed its check and the API server then
// refused the policies' kind. The READMEs say the same minimum.
func TestKubeVersion(t *testing.T) {
	helm, _ := tools(t)
	for version, installs := range map[string]bool{"1.29.9": false, "v1.30.0": true, "1.30.0-gke.1": true, "1.37.1": true} {
		_, err := run(t, helm, "template", "bar-controller", chart, "--namespace", "bar-controller", "--kube-version", version)
		switch {
		case installs && err != nil:
			t.Errorf("Kubernetes %s: %v", version, err)
		case !installs && err == nil:
			t.Errorf("Kubernetes %s: rendered, want the chart's kubeVersion to refuse it", version)
		case !installs && !strings.Contains(err.Error(), "kubeVersion"):
			t.Errorf("Kubernetes %s: %v, want an error naming kubeVersion", version, err)
		}
	}
	for file, want := range map[string]string{"../README.md": "Kubernetes 1.30 or later", chart + "/README.md": "Kubernetes 1.30 or later"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(data)), " "), want) {
			t.Errorf("%s does not say %q", file, want)
		}
	}
}
