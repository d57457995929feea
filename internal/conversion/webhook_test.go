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

package conversion

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// What the API server sends: objects as stored, with the metadata it keeps.
const (
	alphaBar = `{"apiVersion":"barcontroller.dev/v1alpha1","kind":"Bar",
	  "metadata":{"name":"web","namespace":"default","uid":"u1","resourceVersion":"42","generation":3,
	    "labels":{"team":"a"},"creationTimestamp":"2026-01-02T03:04:05Z",
	    "managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"barcontroller.dev/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]},
	  "spec":{"deploymentName":"web-nginx","replicas":2,"image":"nginx:1.28.0"},
	  "status":{"observedGeneration":3,"availableReplicas":2,"conditions":[{"type":"Ready","status":"True","reason":"DeploymentAvailable","message":"2 of 2","lastTransitionTime":"2026-01-02T03:04:05Z","observedGeneration":3}]}}`
	v1Bar = `{"apiVersion":"barcontroller.dev/v1","kind":"Bar",
	  "metadata":{"name":"web","namespace":"default","uid":"u1","resourceVersion":"42"},
	  "spec":{"replicas":2,"deployment":{"name":"web-nginx"},
	    "template":{"image":"nginx:1.28.0","resources":{"requests":{"cpu":"100m","memory":"64Mi"},"limits":{"memory":"128Mi"}}}}}`
)

func review(t *testing.T, c *Converter, to string, objects ...string) *apiextensionsv1.ConversionResponse {
	t.Helper()
	req := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: "r1", DesiredAPIVersion: to},
	}
	for _, o := range objects {
		req.Request.Objects = append(req.Request.Objects, runtime.RawExtension{Raw: []byte(o)})
	}
	body, _ := json.Marshal(req)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out apiextensionsv1.ConversionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.UID != "r1" {
		t.Fatalf("response %+v does not answer request r1", out.Response)
	}
	return out.Response
}

func object(t *testing.T, raw runtime.RawExtension) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw.Raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func TestConvertsBothWays(t *testing.T) {
	c := NewConverter()
	resp := review(t, c, "barcontroller.dev/v1", alphaBar)
	if resp.Result.Status != metav1.StatusSuccess || len(resp.ConvertedObjects) != 1 {
		t.Fatalf("result %+v, %d objects", resp.Result, len(resp.ConvertedObjects))
	}
	v1 := object(t, resp.ConvertedObjects[0])
	for _, check := range []struct {
		path []string
		want any
	}{
		{[]string{"apiVersion"}, "barcontroller.dev/v1"},
		{[]string{"spec", "deployment", "name"}, "web-nginx"},
		{[]string{"spec", "template", "image"}, "nginx:1.28.0"},
		{[]string{"spec", "replicas"}, float64(2)},
		{[]string{"metadata", "resourceVersion"}, "42"},
		{[]string{"metadata", "uid"}, "u1"},
		{[]string{"metadata", "labels", "team"}, "a"},
		{[]string{"status", "availableReplicas"}, float64(2)},
	} {
		if got := get(v1, check.path...); got != check.want {
			t.Errorf("%s = %v, want %v", strings.Join(check.path, "."), got, check.want)
		}
	}
	if mf, _ := get(v1, "metadata", "managedFields").([]any); len(mf) != 1 {
		t.Errorf("managedFields %v: the API server needs them back unchanged", mf)
	}
	if get(v1, "spec", "deploymentName") != nil {
		t.Error("v1 carries v1alpha1's deploymentName")
	}

	// v1 with resources to v1alpha1 and back: the resources survive.
	resp = review(t, c, "barcontroller.dev/v1alpha1", v1Bar)
	alpha := resp.ConvertedObjects[0]
	if a := object(t, alpha); get(a, "spec", "deploymentName") != "web-nginx" {
		t.Errorf("v1alpha1 spec %v", get(a, "spec"))
	}
	resp = review(t, c, "barcontroller.dev/v1", string(alpha.Raw))
	back := object(t, resp.ConvertedObjects[0])
	if got := get(back, "spec", "template", "resources", "limits", "memory"); got != "128Mi" {
		t.Errorf("resources after a round trip through v1alpha1: %v", get(back, "spec", "template"))
	}
	if anns, _ := get(back, "metadata", "annotations").(map[string]any); len(anns) != 0 {
		t.Errorf("annotations %v left behind after the round trip", anns)
	}
}

// Many objects (a list) come back in order, and one bad object fails the
// review with a message that says which.
func TestListsAndFailures(t *testing.T) {
	c := NewConverter()
	resp := review(t, c, "barcontroller.dev/v1alpha1", v1Bar, strings.Replace(v1Bar, `"web"`, `"second"`, 1))
	if len(resp.ConvertedObjects) != 2 || get(object(t, resp.ConvertedObjects[1]), "metadata", "name") != "second" {
		t.Fatalf("list conversion lost order or objects: %+v", resp)
	}
	for name, tc := range map[string]struct{ to, obj, want string }{
		"unknown version": {"barcontroller.dev/v2", v1Bar, "not a version"},
		"other group":     {"apps/v1", v1Bar, "not a version"},
		"no kind":         {"barcontroller.dev/v1", `{"apiVersion":"barcontroller.dev/v1alpha1","metadata":{"name":"x"}}`, "object 1 of 1"},
		"unknown kind":    {"barcontroller.dev/v1", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`, "object 1 of 1: /v1, Kind=ConfigMap is not a Bar of the barcontroller.dev API"},
		// Both refused by their kind, read before anything is decoded
		// (shape.go); a Status would decode (every scheme knows the core
		// group's Status).
		"another API group": {"barcontroller.dev/v1", `{"apiVersion":"v1","kind":"Status","status":"Success"}`, "object 1 of 1: /v1, Kind=Status is not a Bar of the barcontroller.dev API"},
	} {
		t.Run(name, func(t *testing.T) {
			resp := review(t, c, tc.to, tc.obj)
			if resp.Result.Status != metav1.StatusFailure || !strings.Contains(resp.Result.Message, tc.want) || resp.ConvertedObjects != nil {
				t.Errorf("result %+v, want a failure mentioning %q and no objects", resp.Result, tc.want)
			}
		})
	}
}
