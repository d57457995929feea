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
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestAggregatedRolesGrantBars: with rbac.aggregateClusterRoles, the
// built-in view, edit and admin roles take in Bars, as
// kube-controller-manager's ClusterRole aggregation fills them on a real
// control plane, and as the API server then answers SubjectAccessReviews:
// a namespace's viewer reads its Bars and writes none, its editor writes
// them but not their status, and neither has anything in another
// namespace. Before the chart's roles are applied, the editor may not
// create a Bar (what the value adds).
func TestAggregatedRolesGrantBars(t *testing.T) {
	helmBin := requireHelm(t)
	requireControlPlane(t)
	cluster := startClusterWith(t, localcluster.Options{ControllerManager: true})
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	createNamespace(t, kube, "tenant", nil)
	createNamespace(t, kube, "other", nil)
	for user, role := range map[string]string{"viewer": "view", "editor": "edit"} {
		_, err := kube.RbacV1().RoleBindings("tenant").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	allowed := func(user, verb, ns, subresource string) bool {
		t.Helper()
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "barcontroller.dev", Resource: "bars", Subresource: subresource},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	if allowed("editor", "create", "tenant", "") {
		t.Fatal("the editor may create Bars before the chart's roles exist: the test proves nothing")
	}

	out, err := run(t, helmBin, "template", "bar-controller", chart, "--namespace", "bar-controller",
		"--set", "rbac.aggregateClusterRoles=true", "--show-only", "templates/aggregate.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "aggregate.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cluster.Kubectl(ctx, "apply", "--server-side", "-f", file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The aggregation controller fills the built-in roles within moments.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return allowed("editor", "create", "tenant", "") && allowed("viewer", "list", "tenant", ""), nil
	})
	if err != nil {
		t.Fatalf("the built-in roles never took in the chart's: %v", err)
	}
	for _, c := range []struct {
		user, verb, ns, subresource string
		want                        bool
	}{
		{"viewer", "get", "tenant", "", true},
		{"viewer", "watch", "tenant", "", true},
		{"viewer", "get", "tenant", "status", true},
		{"viewer", "create", "tenant", "", false},
		{"viewer", "delete", "tenant", "", false},
		{"editor", "update", "tenant", "", true},
		{"editor", "delete", "tenant", "", true},
		{"editor", "deletecollection", "tenant", "", true},
		{"editor", "patch", "tenant", "status", false},
		{"editor", "update", "tenant", "status", false},
		{"editor", "create", "other", "", false},
		{"viewer", "list", "other", "", false},
	} {
		if got := allowed(c.user, c.verb, c.ns, c.subresource); got != c.want {
			t.Errorf("%s %s bars/%s in %s: allowed %v, want %v", c.user, c.verb, c.subresource, c.ns, got, c.want)
		}
	}
}
