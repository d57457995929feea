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

// Command crd-conversion adds the conversion webhook to the CRD that
// controller-gen generated (hack/update-codegen.sh runs it), so that the CRD
// file itself says how its versions convert: no file in the repository ever
// serves two versions with the "None" strategy, which would relabel a
// v1alpha1 object as v1 without moving its fields. controller-gen has no
// marker for it (kubebuilder projects patch it in with kustomize).
//
// The stanza names the Service of artifacts/install and no caBundle: the
// controller fills the caBundle at run time (internal/webhookcert) with a
// merge patch, and a later `kubectl apply --server-side` of this file leaves
// it alone, since it does not set the field.
//
// Usage: go run ./hack/crd-conversion artifacts/crd/barcontroller.dev_bars.yaml
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/barcontroller/bar-controller/internal/conversion"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crd-conversion CRD-FILE")
		os.Exit(2)
	}
	if err := addConversion(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "crd-conversion: %v\n", err)
		os.Exit(1)
	}
}

func addConversion(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	// Strict: a field these types do not know means controller-gen and
	// the apiextensions module in go.mod disagree, and writing the file
	// back would drop it.
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if crd.Name != conversion.CRDName {
		return fmt.Errorf("%s holds CustomResourceDefinition %q, want %s", path, crd.Name, conversion.CRDName)
	}
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			// The only version internal/conversion answers.
			ConversionReviewVersions: []string{"v1"},
			ClientConfig: &apiextensionsv1.WebhookClientConfig{
				Service: &apiextensionsv1.ServiceReference{
					Namespace: conversion.InstallNamespace,
					Name:      conversion.ServiceName,
					Path:      ptr.To(conversion.Path),
					Port:      ptr.To[int32](443),
				},
			},
		},
	}
	if err := limitQuantities(&crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := marshal(&crd)
	if err != nil {
		return err
	}
	// controller-gen starts its files with a document separator; keep it,
	// so the file differs from its output by the stanza alone.
	if bytes.HasPrefix(raw, []byte("---\n")) {
		out = append([]byte("---\n"), out...)
	}
	return os.WriteFile(path, out, 0o644)
}

// limitQuantities gives the quantities of v1's spec.template.resources a
// maxLength and an exponent of at most two digits, and its limits and
// requests at most barcontroller.MaxResources names of at most
// barcontroller.MaxResourceNameBytes
// (barcontroller.BoundedQuantity says why: what a quantity costs to parse
// and write grows with its digits and its exponent, in every conversion
// and in the controller). controller-gen has no marker for a map's values
// of a type from another package.
func limitQuantities(crd *apiextensionsv1.CustomResourceDefinition) error {
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Name != "v1" {
			continue
		}
		props := func(s *apiextensionsv1.JSONSchemaProps, name string) *apiextensionsv1.JSONSchemaProps {
			if s == nil {
				return nil
			}
			p, ok := s.Properties[name]
			if !ok {
				return nil
			}
			return &p
		}
		var root *apiextensionsv1.JSONSchemaProps
		if v.Schema != nil {
			root = v.Schema.OpenAPIV3Schema
		}
		resources := props(props(props(root, "spec"), "template"), "resources")
		if resources == nil {
			return fmt.Errorf("version %s has no spec.template.resources", v.Name)
		}
		for _, list := range []string{"limits", "requests"} {
			p, ok := resources.Properties[list]
			if !ok || p.AdditionalProperties == nil || p.AdditionalProperties.Schema == nil {
				return fmt.Errorf("version %s has no spec.template.resources.%s values", v.Name, list)
			}
			// The schema of the values is behind a pointer: p, a copy of
			// the map's value, shares it.
			p.AdditionalProperties.Schema.MaxLength = ptr.To[int64](barcontroller.MaxQuantityBytes)
			p.AdditionalProperties.Schema.Pattern = barcontroller.QuantityPattern
			// p is a copy: what is set on p itself is written back.
			p.MaxProperties = ptr.To[int64](barcontroller.MaxResources)
			p.XValidations = apiextensionsv1.ValidationRules{{
				Rule:    fmt.Sprintf("self.all(name, size(name) <= %d)", barcontroller.MaxResourceNameBytes),
				Message: fmt.Sprintf("a resource name is at most %d bytes", barcontroller.MaxResourceNameBytes),
			}}
			resources.Properties[list] = p
		}
		return nil
	}
	return fmt.Errorf("no version v1")
}

// marshal writes the CRD the way controller-gen does: without the status
// and the null creationTimestamp that the Go types always carry.
func marshal(crd *apiextensionsv1.CustomResourceDefinition) ([]byte, error) {
	j, err := json.Marshal(crd)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	delete(obj, "status")
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(obj)
}
