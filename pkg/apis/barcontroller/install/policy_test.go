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

package install

import (
	"os"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// The ValidatingAdmissionPolicy shipped with the CRD
// (artifacts/admission) judges a v1alpha1 write as the v1 Bar it
// makes; test/e2e's TestResourcesAnnotation proves what it refuses on a
// real API server. These tests hold it to the CRD file and the Go types.

func readPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	raw, err := os.ReadFile("../../../../artifacts/admission/bars.barcontroller.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d YAML documents, want the policy and its binding", len(docs))
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	return &policy, &binding
}

// The policy must see every write of a Bar, in every served version, as
// the storage version: matchPolicy Equivalent has the API server convert a
// v1alpha1 request to v1 first. Failing closed: a write it could not
// judge would be stored unjudged.
func TestPolicyMatchesEveryBarWrite(t *testing.T) {
	policy, binding := readPolicy(t)
	crd := readCRD(t)
	spec := policy.Spec
	if ptr.Deref(spec.FailurePolicy, "") != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", ptr.Deref(spec.FailurePolicy, ""))
	}
	mc := spec.MatchConstraints
	if mc == nil || ptr.Deref(mc.MatchPolicy, "") != admissionregistrationv1.Equivalent || len(mc.ResourceRules) != 1 {
		t.Fatalf("matchConstraints %+v, want one rule with matchPolicy Equivalent", mc)
	}
	rule := mc.ResourceRules[0]
	if !slices.Equal(rule.APIGroups, []string{crd.Spec.Group}) || !slices.Equal(rule.APIVersions, []string{barv1.SchemeGroupVersion.Version}) ||
		!slices.Equal(rule.Resources, []string{crd.Spec.Names.Plural}) {
		t.Errorf("rule %+v, want group %s, version %s (stored), resource %s", rule, crd.Spec.Group, barv1.SchemeGroupVersion.Version, crd.Spec.Names.Plural)
	}
	if !version(t, crd, barv1.SchemeGroupVersion.Version).Storage {
		t.Errorf("the policy judges %s, which is not the storage version", barv1.SchemeGroupVersion.Version)
	}
	if !slices.Equal(rule.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
		t.Errorf("operations %v, want CREATE and UPDATE", rule.Operations)
	}
	var key string
	for _, v := range spec.Variables {
		if v.Name == "key" {
			key = v.Expression
		}
	}
	if want := "'" + barv1alpha1.ResourcesAnnotation + "'"; key != want {
		t.Errorf("variables.key %s, want %s", key, want)
	}
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) ||
		binding.Spec.MatchResources != nil || binding.Spec.ParamRef != nil {
		t.Errorf("binding %+v, want policy %s for every Bar, Deny", binding.Spec, policy.Name)
	}
}

// Every CEL rule of v1's schema that v1alpha1's schema does not have (the
// rules on spec.template.resources, which v1alpha1 carries in an
// annotation the CRD cannot look into) must be in the policy, so that a
// v1alpha1 write cannot store what v1 refuses. The policy's validation
// says the rule's message.
func TestPolicyCarriesV1OnlyRules(t *testing.T) {
	policy, _ := readPolicy(t)
	crd := readCRD(t)
	alpha := rules(version(t, crd, barv1alpha1.SchemeGroupVersion.Version).Schema.OpenAPIV3Schema, "", nil)
	alphaRules := map[string]bool{}
	for _, r := range alpha {
		alphaRules[r.Rule] = true
	}
	var v1Only []string
	for _, r := range rules(version(t, crd, barv1.SchemeGroupVersion.Version).Schema.OpenAPIV3Schema, "", nil) {
		if alphaRules[r.Rule] {
			continue
		}
		v1Only = append(v1Only, r.Path)
		found := false
		for _, v := range policy.Spec.Validations {
			if strings.Contains(v.Message+v.MessageExpression, r.Message) {
				found = true
			}
		}
		if !found {
			t.Errorf("v1's rule at %s (%s, %q) has no validation in the policy", r.Path, r.Rule, r.Message)
		}
	}
	// Today those are the rules on claims and on the names in limits and
	// requests; a rule added to v1 alone shows up here.
	want := []string{"spec.template.resources", "spec.template.resources.limits", "spec.template.resources.requests"}
	if !slices.Equal(v1Only, want) {
		t.Errorf("v1-only rules at %v, want %v: does the policy carry the new ones?", v1Only, want)
	}
}

type rule struct {
	Path, Rule, Message string
}

// rules lists the x-kubernetes-validations of a schema and everything
// under it, with their paths.
func rules(s *apiextensionsv1.JSONSchemaProps, path string, out []rule) []rule {
	for _, v := range s.XValidations {
		out = append(out, rule{Path: path, Rule: v.Rule, Message: v.Message})
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := s.Properties[name]
		out = rules(&p, strings.TrimPrefix(path+"."+name, "."), out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		out = rules(s.Items.Schema, path+"[]", out)
	}
	return out
}
