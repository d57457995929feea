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
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// admission is what the API server does to a Bar before storing it, with
// the CRD's own schema: default, then validate the OpenAPI schema and the
// CEL rules, and the object's name. Built from the same libraries the API
// server uses (k8s.io/apiextensions-apiserver), from artifacts/crd.
type admission struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

var loadAdmission = sync.OnceValues(func() (*admission, error) {
	b, err := os.ReadFile("artifacts/crd/barcontroller.dev_bars.yaml")
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return nil, err
	}
	// The CRD lists every version of the API; the controller reads v1.
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == barv1.SchemeGroupVersion.Version
	})
	if i < 0 {
		return nil, fmt.Errorf("the CRD has no version %s", barv1.SchemeGroupVersion.Version)
	}
	var props apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[i].Schema.OpenAPIV3Schema, &props, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(&props)
	if err != nil {
		return nil, err
	}
	v, _, err := apiservervalidation.NewSchemaValidator(&props)
	if err != nil {
		return nil, err
	}
	return &admission{structural: s, schema: v, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
})

// admit returns the Bar as the API server would store it, or false if it
// would refuse it.
func (a *admission) admit(obj map[string]any) (*barv1.Bar, bool) {
	u := &unstructured.Unstructured{Object: obj}
	var meta metav1.ObjectMeta
	meta.Name, meta.Namespace = u.GetName(), u.GetNamespace()
	if len(apimachineryvalidation.ValidateObjectMeta(&meta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))) > 0 {
		return nil, false
	}
	defaulting.Default(obj, a.structural)
	if len(apiservervalidation.ValidateCustomResource(nil, obj, a.schema)) > 0 {
		return nil, false
	}
	if errs, _ := a.cel.Validate(context.Background(), nil, a.structural, obj, nil, celconfig.RuntimeCELCostBudget); len(errs) > 0 {
		return nil, false
	}
	var bar barv1.Bar
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &bar); err != nil {
		return nil, false
	}
	bar.UID = "0b8a9f47-5d3c-4f2e-9a61-7c2d1e3f4a5b"
	return &bar, true
}

// FuzzNewDeployment: every Bar the CRD admits yields a Deployment the API
// server accepts, in what newDeployment decides: its name, its labels, a
// selector that is valid and selects its own template, one container with
// a valid name and the Bar's image, replicas as asked.
func FuzzNewDeployment(f *testing.F) {
	f.Add("web", "web", true, "nginx:1.28.0", true, int32(3))
	f.Add("a.b-c", "x.y", false, "", false, int32(0))
	f.Add("Web", "web", true, "nginx", true, int32(1))
	f.Fuzz(func(t *testing.T, name, deploymentName string, hasImage bool, image string, hasReplicas bool, replicas int32) {
		a, err := loadAdmission()
		if err != nil {
			t.Fatal(err)
		}
		spec := map[string]any{"deployment": map[string]any{"name": deploymentName}}
		if hasImage {
			spec["template"] = map[string]any{"image": image}
		}
		if hasReplicas {
			spec["replicas"] = int64(replicas)
		}
		bar, ok := a.admit(map[string]any{
			"apiVersion": "barcontroller.dev/v1", "kind": "Bar",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec":     spec,
		})
		if !ok {
			return // the API server would refuse this Bar
		}
		b, err := json.Marshal(newDeployment(bar))
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		checkDeploymentValid(t, bar, &d)
	})
}

func checkDeploymentValid(t *testing.T, bar *barv1.Bar, d *appsv1.Deployment) {
	t.Helper()
	if errs := validation.IsDNS1123Subdomain(d.Name); len(errs) > 0 {
		t.Errorf("Deployment name %q: %v", d.Name, errs)
	}
	path := field.NewPath("metadata", "labels")
	if errs := metav1validation.ValidateLabels(d.Labels, path); len(errs) > 0 {
		t.Errorf("Deployment labels: %v", errs)
	}
	if errs := metav1validation.ValidateLabels(d.Spec.Template.Labels, path); len(errs) > 0 {
		t.Errorf("template labels: %v", errs)
	}
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 {
		t.Fatalf("empty selector")
	}
	if errs := metav1validation.ValidateLabelSelector(d.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("spec", "selector")); len(errs) > 0 {
		t.Errorf("selector: %v", errs)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %v does not select the template's labels %v (%v)", d.Spec.Selector, d.Spec.Template.Labels, err)
	}
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(validation.IsDNS1123Label(cs[0].Name)) > 0 || cs[0].Image != bar.Spec.Template.Image || cs[0].Image == "" {
		t.Errorf("containers %+v: want one validly named container running %q", cs, bar.Spec.Template.Image)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 0 || (bar.Spec.Replicas != nil && *d.Spec.Replicas != *bar.Spec.Replicas) {
		t.Errorf("replicas %v, want the Bar's %v", d.Spec.Replicas, bar.Spec.Replicas)
	}
}

// The fuzz target's filter must refuse what the API server refuses, or it
// proves nothing; test/integration's TestAdmissionRejectsBadBars checks the
// same cases against the real API server.
func TestFuzzAdmissionFollowsTheCRD(t *testing.T) {
	a, err := loadAdmission()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, deploymentName, image string
		admit                       bool
	}{
		{"web", "web", "nginx:1.28.0", true},
		{"web", "web", "", true}, // defaulted
		{"Web", "web", "nginx:1.28.0", false},
		{"web", "Web", "nginx:1.28.0", false},
		{"web", "web-", "nginx:1.28.0", false},
		{"web", "web", "nginx", false},
		{"web", "web", "nginx:latest", false},
	} {
		spec := map[string]any{"deployment": map[string]any{"name": tc.deploymentName}}
		if tc.image != "" {
			spec["template"] = map[string]any{"image": tc.image}
		}
		bar, ok := a.admit(map[string]any{
			"apiVersion": "barcontroller.dev/v1", "kind": "Bar",
			"metadata": map[string]any{"name": tc.name, "namespace": "default"}, "spec": spec,
		})
		if ok != tc.admit {
			t.Errorf("%+v: admitted %v, want %v", tc, ok, tc.admit)
		}
		if ok && bar.Spec.Template.Image == "" {
			t.Errorf("%+v: image not defaulted", tc)
		}
	}
}
