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

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// holdPolicy refuses every delete of a Bar in one namespace, the
// namespace controller's too, so that the Bar outlives the rest of its
// namespace's content while the namespace terminates.
const holdPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: %[1]s-hold-bars
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["barcontroller.dev"]
      apiVersions: ["*"]
      operations: ["DELETE"]
      resources: ["bars"]
  validations:
  - expression: "false"
    message: held by the test
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: %[1]s-hold-bars
spec:
  policyName: %[1]s-hold-bars
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: %[1]s
`

// terminatingDecision is the sync's decision when the API server refuses
// a create because the namespace is being deleted (sync.go).
const terminatingDecision = "namespace is being deleted: nothing to do"

// A namespace being deleted refuses every create in it (the API server's
// NamespaceLifecycle admission) with a NamespaceTerminating cause. A Bar
// there whose Deployment is gone (the namespace controller deleted it)
// must not retry the create as a failure: the cause has to come through
// the metadata-only answer the create asks for (answers.go) from a real
// API server, not only from a fake's error. The Bar outlives its
// Deployment here because a policy refuses its delete; in a real cluster
// the namespace controller deletes content in the order discovery lists
// it, so the same window is short but open.
func TestCreateRefusedInTerminatingNamespaceIsTheEnd(t *testing.T) {
	t.Parallel()
	env, ns := setupIntegration(t)
	ctx := context.Background()
	createBar(t, env, ns, "web", "web", 1)
	waitForDeployment(t, env, ns, "web", "Deployment web created", func(*appsv1.Deployment) bool { return true })
	holdBars(t, env, ns, "web")

	if err := env.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the namespace controller to delete Deployment web", func(ctx context.Context) (bool, error) {
		_, err := env.kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	eventually(t, "the controller to see the create refused for a terminating namespace", func(context.Context) (bool, error) {
		return decisions(t, env, ns, "web", terminatingDecision) > 0, nil
	})
	if bar, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil || bar.DeletionTimestamp != nil {
		t.Fatalf("the Bar is gone or going (%v): the policy did not hold it, and the test proves nothing", err)
	}

	// Three whole syncs more (resyncs, one a second): each must try the
	// create once, be refused, and end there, a success, logged as the
	// decision above. A failure, or the cause read as the caches being
	// behind (Conflict, AlreadyExists), would end the sync otherwise and
	// retry it with backoff.
	syncs0 := env.syncs(t, ns, "web")
	window := env.writesOverSyncs(t, ns, "web", 3)
	syncs := env.syncs(t, ns, "web") - syncs0
	refused := 0
	for _, w := range window {
		if w != fmt.Sprintf("create deployments %s/web 403", ns) {
			t.Errorf("wrote %q in a terminating namespace, want only refused creates of its Deployment", w)
			continue
		}
		refused++
	}
	t.Logf("%d refused creates of Deployment web over %d syncs", refused, syncs)
	// One sync may have been under way as the window opened, and one may
	// start as it closes.
	if refused == 0 || refused > syncs+1 {
		t.Errorf("%d refused creates over %d syncs, want one per sync: %q", refused, syncs, window)
	}
	since := logSince(t, env, `"Sync"`, fmt.Sprintf("bar=%q", ns+"/web"), fmt.Sprintf("decision=%q", terminatingDecision))
	done, decided := 0, 0
	for _, line := range since {
		if !strings.Contains(line, fmt.Sprintf("bar=%q", ns+"/web")) {
			continue
		}
		switch {
		case strings.Contains(line, `"Sync done"`):
			done++
			if !strings.Contains(line, `result="success"`) {
				t.Errorf("a sync of the Bar in its terminating namespace did not end in success: %s", line)
			}
		case strings.Contains(line, fmt.Sprintf("decision=%q", terminatingDecision)):
			decided++
		case strings.Contains(line, "Error syncing Bar"):
			t.Errorf("a sync of the Bar in its terminating namespace logged a failure: %s", line)
		}
	}
	if done < syncs || decided < done {
		t.Errorf("%d syncs done since the first refusal (%d counted in the window), %d of them decided the namespace is going: want every one", done, syncs, decided)
	}
}

// holdBars installs holdPolicy for ns and waits until the API server
// enforces it (policies load asynchronously) on a dry-run delete of the
// Bar probe; the cleanup removes it, and the namespace controller then
// finishes.
func holdBars(t *testing.T, env *integrationEnv, ns, probe string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "hold.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(holdPolicy, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Before the apply: a partial one must not outlive the test.
	t.Cleanup(func() {
		_, _ = env.cluster.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file)
	})
	if _, err := env.cluster.Kubectl(context.Background(), "apply", "--server-side", "-f", file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the policy to refuse a dry-run delete of Bar "+probe, func(ctx context.Context) (bool, error) {
		err := env.bars.BarcontrollerV1().Bars(ns).Delete(ctx, probe, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	})
}

// decisions counts the sync decisions the controller's trace logged for
// the Bar ns/name.
func decisions(t *testing.T, env *integrationEnv, ns, name, decision string) int {
	t.Helper()
	parts := []string{`"Sync"`, fmt.Sprintf("bar=%q", ns+"/"+name), fmt.Sprintf("decision=%q", decision)}
	n := 0
	for _, line := range logSince(t, env, parts...) {
		if holdsAll(line, parts) {
			n++
		}
	}
	return n
}

// logSince is the controller's log from the first line that holds every
// part on, that line first; nil if no line does.
func logSince(t *testing.T, env *integrationEnv, parts ...string) []string {
	t.Helper()
	data, err := os.ReadFile(env.controller.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if out == nil && !holdsAll(line, parts) {
			continue
		}
		out = append(out, line)
	}
	return out
}

func holdsAll(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}
