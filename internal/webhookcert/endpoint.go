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

package webhookcert

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Annotations of the CRD: which Secret its caBundle is kept from, and for
// which endpoint. One CRD has one caBundle, so one Secret's CAs; a keeper
// of another Secret for the same endpoint refuses instead of replacing
// them (two such keepers would replace each other's bundle every pass).
// Annotations, not spec: writing them does not make the API server
// rebuild the CRD's handler, which would close every watch of Bars.
const (
	BundleSecretAnnotation   = "webhookcert.barcontroller.dev/ca-bundle-secret"
	BundleEndpointAnnotation = "webhookcert.barcontroller.dev/ca-bundle-endpoint"
)

// endpoint is where the API server calls the CRD's conversion webhook.
type endpoint struct {
	// id is the URL the API server calls: the clientConfig's url, or the
	// Service's https://name.namespace.svc:port/path.
	id string
	// serverName is the name its TLS client checks the certificate for:
	// the URL's host, or name.namespace.svc for a Service, as
	// k8s.io/apiserver/pkg/util/webhook builds it.
	serverName string
}

// endpointOf returns the CRD's webhook endpoint, or nil if it has none
// (conversion None, or no clientConfig): then nothing calls the webhook,
// and no name is required of the certificate.
func endpointOf(crd *apiextensionsv1.CustomResourceDefinition) *endpoint {
	c := crd.Spec.Conversion
	if c == nil || c.Webhook == nil || c.Webhook.ClientConfig == nil {
		return nil
	}
	cc := c.Webhook.ClientConfig
	switch {
	case cc.Service != nil:
		host := cc.Service.Name + "." + cc.Service.Namespace + ".svc"
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		path := ""
		if cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		return &endpoint{id: "https://" + host + ":" + strconv.Itoa(int(port)) + path, serverName: host}
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil || u.Hostname() == "" {
			return nil
		}
		return &endpoint{id: *cc.URL, serverName: u.Hostname()}
	}
	return nil
}

// RefusedError says why a keeper keeps neither the Secret nor the CRD's
// caBundle: another replica's configuration, not a failure to retry at
// once. The replica is not ready while refused.
type RefusedError struct{ reason string }

func (e *RefusedError) Error() string { return e.reason }

// refusal returns why this keeper must not keep the certificate for the
// CRD, or nil.
func (k *Keeper) refusal(crd *apiextensionsv1.CustomResourceDefinition, ep *endpoint) *RefusedError {
	if ep == nil {
		return nil
	}
	if !slices.ContainsFunc(k.Names, func(n string) bool { return sameName(n, ep.serverName) }) {
		// The API server checks the certificate for serverName; a
		// certificate made for this replica's names would fail it, and a
		// Secret shared with the replicas the API server does call would
		// gain names that none of them needs.
		return &RefusedError{fmt.Sprintf("CustomResourceDefinition %s calls its conversion webhook at %s, as %s, "+
			"which is not one of this replica's certificate names %v: the API server does not call this replica, "+
			"so it keeps neither Secret %s/%s nor the CRD's caBundle. Give it that name (--conversion-webhook-cert-names), "+
			"point the CRD at its Service, or turn its webhook off (--conversion-webhook-bind-address=0)",
			k.CRDName, ep.id, ep.serverName, k.Names, k.Namespace, k.SecretName)}
	}
	owner, forEndpoint := crd.Annotations[BundleSecretAnnotation], crd.Annotations[BundleEndpointAnnotation]
	if owner != "" && owner != k.secretRef() && forEndpoint == ep.id {
		return &RefusedError{fmt.Sprintf("the caBundle of CustomResourceDefinition %s is kept from Secret %s for %s; "+
			"this replica keeps Secret %s, and two Secrets for one webhook would replace each other's CAs. "+
			"Run it with --conversion-webhook-secret=%s, or, if nothing keeps %s any more, hand the bundle over: "+
			"kubectl annotate crd %s %s- %s-",
			k.CRDName, owner, ep.id, k.secretRef(), owner, owner, k.CRDName, BundleSecretAnnotation, BundleEndpointAnnotation)}
	}
	return nil
}

func (k *Keeper) secretRef() string { return k.Namespace + "/" + k.SecretName }

// claimed says whether the CRD's annotations already name this keeper's
// Secret for ep.
func (k *Keeper) claimed(crd *apiextensionsv1.CustomResourceDefinition, ep *endpoint) bool {
	id := ""
	if ep != nil {
		id = ep.id
	}
	return crd.Annotations[BundleSecretAnnotation] == k.secretRef() && crd.Annotations[BundleEndpointAnnotation] == id
}
