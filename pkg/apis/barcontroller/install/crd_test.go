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
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

func readCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile("../../../../artifacts/crd/barcontroller.dev_bars.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

func version(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	t.Helper()
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return &crd.Spec.Versions[i]
		}
	}
	t.Fatalf("the CRD has no version %s", name)
	return nil
}

// With the "None" conversion strategy the API server converts by rewriting
// apiVersion only. v1alpha1 and v1 put the same data in different places,
// so serving a version other than the stored one would store or return
// misplaced (and then pruned) fields: only a conversion webhook may let both
// be served. Whatever the versions, the file must never serve two with None.
func TestCRDServesOtherVersionsOnlyWithConversion(t *testing.T) {
	crd := readCRD(t)
	var served, stored []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
		if v.Storage {
			stored = append(stored, v.Name)
		}
	}
	if len(stored) != 1 {
		t.Fatalf("storage versions %v, want exactly one", stored)
	}
	if crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy == apiextensionsv1.NoneConverter {
		if len(served) != 1 || served[0] != stored[0] {
			t.Errorf("conversion strategy None with served versions %v and storage version %v: only the storage version may be served", served, stored)
		}
	}
}

// The versions as this release ships them: both served, v1 stored (what
// the controller reads), v1alpha1 deprecated with a warning that says where
// its fields went in v1.
func TestCRDVersions(t *testing.T) {
	crd := readCRD(t)
	v1, alpha := version(t, crd, barv1.SchemeGroupVersion.Version), version(t, crd, barv1alpha1.SchemeGroupVersion.Version)
	if !v1.Served || !v1.Storage || v1.Deprecated {
		t.Errorf("v1: served %v, storage %v, deprecated %v; want served, stored, not deprecated", v1.Served, v1.Storage, v1.Deprecated)
	}
	if !alpha.Served || alpha.Storage || !alpha.Deprecated {
		t.Errorf("v1alpha1: served %v, storage %v, deprecated %v; want served, not stored, deprecated", alpha.Served, alpha.Storage, alpha.Deprecated)
	}
	if w := alpha.DeprecationWarning; w == nil || !strings.Contains(*w, "barcontroller.dev/v1 ") ||
		!strings.Contains(*w, "spec.deployment.name") || !strings.Contains(*w, "spec.template.image") {
		t.Errorf("v1alpha1 deprecation warning %v, want one naming barcontroller.dev/v1 and the moved fields", ptr.Deref(w, "<none>"))
	}
}

// The CRD file names the webhook itself (hack/crd-conversion), the Service
// of artifacts/install, on the path internal/conversion serves, in the only
// ConversionReview version it answers. The caBundle is the controller's to
// fill (internal/webhookcert): a file that set it would overwrite the
// running controller's CA on every apply.
func TestCRDConversionWebhook(t *testing.T) {
	c := readCRD(t).Spec.Conversion
	if c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil {
		t.Fatalf("spec.conversion %+v, want strategy Webhook with a clientConfig", c)
	}
	if got := c.Webhook.ConversionReviewVersions; len(got) != 1 || got[0] != "v1" {
		t.Errorf("conversionReviewVersions %v, want [v1]", got)
	}
	cc := c.Webhook.ClientConfig
	want := apiextensionsv1.ServiceReference{Namespace: "bar-controller", Name: "bar-controller-webhook", Path: ptr.To("/convert"), Port: ptr.To[int32](443)}
	if cc.Service == nil || !reflect.DeepEqual(*cc.Service, want) {
		t.Errorf("clientConfig.service %+v, want %+v", cc.Service, want)
	}
	if cc.URL != nil || len(cc.CABundle) != 0 {
		t.Errorf("clientConfig url %v, caBundle of %d bytes: want neither", ptr.Deref(cc.URL, ""), len(cc.CABundle))
	}
}

// Each version's schema default (applied by the API server) and its
// DefaultImage constant (used by the controller for objects that skipped
// admission) must not drift apart, nor the versions from each other.
func TestCRDDefaultsMatchConstants(t *testing.T) {
	crd := readCRD(t)

	alpha := version(t, crd, barv1alpha1.SchemeGroupVersion.Version).Schema.OpenAPIV3Schema.Properties["spec"]
	if got := string(alpha.Properties["image"].Default.Raw); got != `"`+barv1alpha1.DefaultImage+`"` {
		t.Errorf("v1alpha1 default image %s, DefaultImage %q", got, barv1alpha1.DefaultImage)
	}
	if got := string(alpha.Properties["replicas"].Default.Raw); got != "1" {
		t.Errorf("v1alpha1 default replicas %s, want 1", got)
	}

	spec := version(t, crd, barv1.SchemeGroupVersion.Version).Schema.OpenAPIV3Schema.Properties["spec"]
	// template defaults to {} so that its image default applies when the
	// whole template is left out.
	if got := string(spec.Properties["template"].Default.Raw); got != "{}" {
		t.Errorf("v1 default template %s, want {}", got)
	}
	if got := string(spec.Properties["template"].Properties["image"].Default.Raw); got != `"`+barv1.DefaultImage+`"` {
		t.Errorf("v1 default image %s, DefaultImage %q", got, barv1.DefaultImage)
	}
	if got := string(spec.Properties["replicas"].Default.Raw); got != "1" {
		t.Errorf("v1 default replicas %s, want 1", got)
	}
	if barv1.DefaultImage != barv1alpha1.DefaultImage {
		t.Errorf("v1 DefaultImage %q, v1alpha1 %q: a Bar without an image would run different images in each version", barv1.DefaultImage, barv1alpha1.DefaultImage)
	}
}
