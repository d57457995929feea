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
	"context"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/internal/testcluster"
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
	e := newEnvWith(t, apfBars, testcluster.Options{CRDs: []string{crdDir}, APIServerFlags: []string{
		// 45 seats in all instead of 600, so that the starved level's share
		// rounds up to one seat: two requests at once are one too many.
		// Only the controller feels it; the test's admin is exempt.
		"--max-requests-inflight=30", "--max-mutating-requests-inflight=15"}})
	e.starve(t)
	kubeconfig := e.installedIdentity(t)
	apiMetrics := func() testcluster.Metrics {
		client, err := rest.HTTPClientFor(e.cluster.Config)
		if err != nil {
			t.Fatal(err)
		}
		m, err := testcluster.Scrape(client, e.cluster.Server+"/metrics", "")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rejected := func(m testcluster.Metrics) float64 {
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

// starve puts the installed ServiceAccount alone in a priority level with
// the smallest share (1 of the ~250 the default levels hold), lending and
// borrowing nothing, and rejecting instead of queueing. It waits until the
// API server uses it.
func (e *env) starve(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	fc := e.kube.FlowcontrolV1()
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: starvedLevel},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](1),
				LendablePercent:          ptr.To[int32](0),
				BorrowingLimitPercent:    ptr.To[int32](0),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Precedence 50 comes before every default schema that could match a
	// ServiceAccount (the lowest, kube-system-service-accounts, is 900).
	if _, err := fc.FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: starvedLevel},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: starvedLevel},
			MatchingPrecedence:         50,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: installNS, Name: installSA}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"},
					Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's APF config controller marks a schema Dangling=False
	// once it has taken it up with its priority level.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		fs, err := fc.FlowSchemas().Get(ctx, starvedLevel, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range fs.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling && c.Status == flowcontrolv1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the API server never took up FlowSchema %s: %v", starvedLevel, err)
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
