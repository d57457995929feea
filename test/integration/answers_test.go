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
	"encoding/json"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// TestNotAcceptableWritesNothing proves on the real API server what the
// controller's fallback after a 406 relies on (metadataAnswer in
// answers.go): the API server negotiates the answer's media type before
// it writes, so a write it answers 406 Not Acceptable wrote nothing, and
// sending it again without the asking repeats nothing. A create and a
// status apply, each asking only for an answer the API server cannot give.
func TestNotAcceptableWritesNothing(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := t.Context()
	const unacceptable = "application/json;as=NoSuchKind;g=meta.k8s.io;v=v1"
	client := env.bars.BarcontrollerV1().RESTClient()

	body, err := json.Marshal(&barv1.Bar{
		TypeMeta:   metav1.TypeMeta{APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar"},
		ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: ns},
		Spec:       barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "refused"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = client.Post().Namespace(ns).Resource("bars").SetHeader("Accept", unacceptable).
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if !apierrors.IsNotAcceptable(err) {
		t.Fatalf("a create asking for %s: %v, want 406 Not Acceptable", unacceptable, err)
	}
	if _, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the create answered 406, the Bar: %v, want NotFound", err)
	}

	createBar(t, env, ns, "kept", "kept", 1)
	before := waitForReady(t, env, ns, "kept", 1)
	apply := []byte(`{"apiVersion":"barcontroller.dev/v1","kind":"Bar","metadata":{"name":"kept"},"status":{"availableReplicas":7}}`)
	err = client.Patch(types.ApplyPatchType).Namespace(ns).Resource("bars").Name("kept").SubResource("status").
		Param("fieldManager", "not-acceptable-test").Param("force", "true").SetHeader("Accept", unacceptable).
		Body(apply).Do(ctx).Error()
	if !apierrors.IsNotAcceptable(err) {
		t.Fatalf("a status apply asking for %s: %v, want 406 Not Acceptable", unacceptable, err)
	}
	after, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.AvailableReplicas == 7 {
		t.Errorf("the status apply answered 406 was written: %+v", after.Status)
	}
	for _, f := range after.ManagedFields {
		if f.Manager == "not-acceptable-test" {
			t.Errorf("the status apply answered 406 left a managedFields entry: %+v (resourceVersion %s, was %s)", f, after.ResourceVersion, before.ResourceVersion)
		}
	}
}
