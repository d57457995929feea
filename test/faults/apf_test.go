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

package faults

import (
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// API Priority and Fairness is the only limit on the controller's requests
// (it has no client-side limit by default, see main.go), so the controller
// must live with 429s: here it is put alone in a priority level with one
// seat and no queue, so every request beyond that is rejected at once. client-go honours the Retry-After of each 429; the controller must
// get through, without turning the rejections into a storm of retries.

const (
	starvedLevel = "bar-faults-starved"
	apfBars      = 500
	// installNS and installSA are the controller's identity from
	// artifacts/install: system:masters, the admin's group, is exempt from
	// APF, so the controller cannot run as the admin here.
	installNS = "bar-controller"
	installSA = "bar-controller"
)

func TestPriorityAndFairnessRejects(t *testing.T) {
	slow(t)
	// Only the controller feels the few seats; the test's admin is exempt.
	e := newEnvWith(t, apfBars, localcluster.Options{CRDs: []string{crdDir}, APIServerFlags: localcluster.StarvedAPIServerFlags})
	e.starve(t)
	kubeconfig := e.installedIdentity(t)
	apiMetrics := func() localcluster.Metrics {
		client, err := rest.HTTPClientFor(e.cluster.Config)
		if err != nil {
			t.Fatal(err)
		}
		m, err := localcluster.Scrape(client, e.cluster.Server+"/metrics", "")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rejected := func(m localcluster.Metrics) float64 {
		v, _ := m.Value("apiserver_flowcontrol_rejected_requests_total", map[string]string{"priority_level": starvedLevel})
		return v
	}
	m0 := apiMetrics()
	before := rejected(m0)
	seats, _ := m0.Value("apiserver_flowcontrol_nominal_limit_seats", map[string]string{"priority_level": starvedLevel})
	if seats != 1 {
		t.Fatalf("priority level %s has %v seats, want 1", starvedLevel, seats)
	}

	c := e.startController(t, "controller", "--kubeconfig="+kubeconfig, insecureMetrics)
	start := time.Now()
	e.createBars(t)
	took := e.waitConverged(t, start)
	m := c.waitQuiet(t)
	apiRejected := rejected(apiMetrics()) - before
	seen, _ := m.Value("rest_client_requests_total", map[string]string{"code": "429"})
	all, _ := m.Value("rest_client_requests_total", nil)
	record(t, "APF rejects (429) the controller's requests, 500 Bars", took)
	t.Logf("converged %v after the first create; the API server rejected %v requests of %s, the controller saw %v 429s in %v requests, %v sync errors",
		took, apiRejected, starvedLevel, seen, all, syncErrors(m))

	// The fault must really have happened, and reached the controller.
	if apiRejected < 10 || seen < 10 {
		t.Errorf("only %v rejections by the API server, %v 429s seen by the controller: the fault did not bite", apiRejected, seen)
	}
	// Backing off means the rejections stay a fraction of the work: about
	// 3 writes per Bar are needed, and a client that retried at once on
	// each 429 would be rejected many times per request.
	if limit := 3.0 * apfBars; seen > limit {
		t.Errorf("%v 429s for %d Bars, want at most %v: the controller does not back off", seen, apfBars, limit)
	}
}

// starve puts the installed ServiceAccount alone in a one-seat priority
// level (localcluster.StarveController).
func (e *env) starve(t *testing.T) {
	t.Helper()
	if err := e.cluster.StarveController(t.Context(), starvedLevel); err != nil {
		t.Fatal(err)
	}
}

// installedIdentity applies artifacts/install's namespace and RBAC and
// returns a kubeconfig for its ServiceAccount: the controller's shipped
// identity, with exactly the access it ships with.
func (e *env) installedIdentity(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		if _, err := e.cluster.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(crdDir, "..", "install", f)); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(installNS).CreateToken(ctx, installSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, "controller.kubeconfig")
	if _, err := e.cluster.WriteKubeconfig(path, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}
