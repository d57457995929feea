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

package adaptive

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// With Resources, the clients main builds from the wrapped configuration
// feed the limit only with the syncs' writes: a 429 on a TokenReview, a
// SubjectAccessReview (the metrics endpoint's) or a Secret update (the
// webhook certificate keeper's) leaves it alone, and one on a Deployment
// patch halves it. Real client-go clients, against a server that rejects
// every request as API Priority and Fairness does.
func TestTransportObservesOnlyTheSyncsResources(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// No Retry-After: client-go then does not retry, and the test
		// sees one answer per request.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`))
	}))
	defer srv.Close()
	l := New(Config{Min: 1, Max: 16, Initial: 8, Resources: []string{"deployments", "bars", "events"}})
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(l.Transport)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, write := range map[string]func() error{
		"a TokenReview": func() error {
			_, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
			return err
		},
		"a SubjectAccessReview": func() error {
			_, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{}, metav1.CreateOptions{})
			return err
		},
		"a Secret update": func() error {
			_, err := kube.CoreV1().Secrets("ns").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.UpdateOptions{})
			return err
		},
	} {
		if err := write(); err == nil {
			t.Fatalf("%s: the server's 429 did not reach the client", name)
		}
		if got := l.Limit(); got != 8 {
			t.Errorf("after a 429 on %s: limit %d, want 8 (not a sync's write)", name, got)
		}
	}
	_, err = kube.AppsV1().Deployments("ns").Patch(ctx, "d", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	if err == nil {
		t.Fatal("the Deployment patch was not rejected")
	}
	if got := l.Limit(); got != 4 {
		t.Errorf("after a 429 on a Deployment patch: limit %d, want 4 (halved)", got)
	}
}
