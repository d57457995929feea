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

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// TestApplyStatusAsksForMetadataOnly: the status write of a real client
// is the apply the typed client would send (path, query, body), asks for
// the answer as metadata only, and reads the resourceVersion from it; an
// error answer keeps its reason. (The fake clientsets of the other tests
// take the typed client's path.)
func TestApplyStatusAsksForMetadataOnly(t *testing.T) {
	bar := newBar("web", "web", 2)
	status := newStatus(bar, 2, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web")}, fixedNow)
	ac := statusApplyConfiguration(bar, &status)
	wantBody, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	answer := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: bar.Name, Namespace: bar.Namespace, UID: bar.UID, ResourceVersion: "42"},
	}
	var conflict atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPatch || r.URL.Path != "/apis/barcontroller.dev/v1/namespaces/default/bars/web/status" ||
			r.URL.RawQuery != "fieldManager=bar-controller&force=true" {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/apply-patch+yaml" {
			t.Errorf("Content-Type %q", ct)
		}
		if !bytes.Equal(body, wantBody) {
			t.Errorf("body\n%s\nwant\n%s", body, wantBody)
		}
		if accept := r.Header.Get("Accept"); !strings.HasPrefix(accept, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1") {
			t.Errorf("Accept %q", accept)
		}
		if conflict.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(&apierrors.NewConflict(barv1.Resource("bars"), bar.Name, nil).ErrStatus)
			return
		}
		writeMetadata(t, w, http.StatusOK, answer)
	}))
	defer srv.Close()
	cs, err := clientset.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{barclientset: cs}
	updated, err := c.applyStatus(context.Background(), bar, ac)
	if err != nil {
		t.Fatal(err)
	}
	if updated.ResourceVersion != "42" || updated.Name != bar.Name {
		t.Errorf("answer read as %s/%s at resourceVersion %q, want %s at 42", updated.Namespace, updated.Name, updated.ResourceVersion, bar.Name)
	}
	conflict.Store(true)
	if _, err := c.applyStatus(context.Background(), bar, ac); !apierrors.IsConflict(err) {
		t.Errorf("a Conflict answer read as %v", err)
	}
}

// TestStatusApplyIsForcedAndConditional: the status write names the Ready
// condition alone, so other writers' conditions keep their owners; it is
// forced (TestApplyStatusAsksForMetadataOnly reads force=true on the
// wire), so no field conflict refuses it; and it carries the
// resourceVersion of the Bar it was judged on, so a Bar changed since the
// cache read it answers Conflict (TestStatusApplyIsRefusedForANamesake in
// test/integration shows the API server refusing it). It sends the UID
// too, which the status subresource drops: there the resourceVersion
// alone refuses.
func TestStatusApplyIsForcedAndConditional(t *testing.T) {
	bar := newBar("web", "web", 2)
	bar.Status.Conditions = []metav1.Condition{{Type: "Audited", Status: metav1.ConditionTrue, Reason: "ByOthers"}}
	status := newStatus(bar, 2, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web")}, fixedNow)
	ac := statusApplyConfiguration(bar, &status)
	if ac.ResourceVersion == nil || *ac.ResourceVersion != bar.ResourceVersion || ac.UID == nil || *ac.UID != bar.UID {
		t.Errorf("the apply carries resourceVersion %v and UID %v, want %s (its precondition) and %s", ac.ResourceVersion, ac.UID, bar.ResourceVersion, bar.UID)
	}
	if n := len(ac.Status.Conditions); n != 1 || *ac.Status.Conditions[0].Type != barv1.ConditionReady {
		t.Errorf("the apply names %d conditions, want Ready alone", n)
	}
}
