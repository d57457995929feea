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
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/barcontroller/bar-controller/internal/webhookcert"
)

// Names of the objects in the install manifests (artifacts/install) and the
// CRD file (artifacts/crd) that the webhook depends on.
const (
	// CRDName is the CRD whose conversion the webhook serves and whose
	// caBundle the controller keeps.
	CRDName = "bars.barcontroller.dev"
	// InstallNamespace is where artifacts/install puts the controller, so
	// where the CRD file's clientConfig looks for the Service.
	InstallNamespace = "bar-controller"
	// ServiceName is the webhook's Service.
	ServiceName = "bar-controller-webhook"
	// SecretName is the Secret the replicas share the certificate in.
	SecretName = "bar-controller-webhook"
)

// Options are the webhook's flags.
type Options struct {
	// BindAddress is where the webhook listens; "0" (the default) turns it
	// off.
	BindAddress string
	// SecretNamespace and SecretName name the Secret with the certificate.
	SecretNamespace, SecretName string
	// CertNames are the names the API server calls the webhook by.
	CertNames []string
	// CertSyncPeriod is how often each replica reads the Secret and the
	// CRD once its certificate is served and trusted; CertGracePeriod how
	// long a new CA is in the CRD's caBundle before a certificate it
	// signed is served, and a superseded one stays (webhookcert.Keeper).
	CertSyncPeriod, CertGracePeriod time.Duration
	// APIServerCIDRs are the addresses the API server calls the webhook
	// from, if the operator knows them: they get room in the body budget
	// and connections that no other address can take (limit.go).
	APIServerCIDRs []netip.Prefix
	// Only serves the webhook and nothing else: no informers, no leader
	// election, no syncs. For rolling the controller back to a release
	// without a webhook while the CRD stores v1 (artifacts/conversion-only).
	Only bool

	secret, certNames, apiServerCIDRs string // the flags' values, until Complete
}

// AddFlags registers the webhook's flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	// Off by default: a controller run out of cluster is not reachable by
	// the API server, and tests and benchmarks need no conversion once
	// every Bar is stored as v1. The shipped Deployment turns it on.
	fs.StringVar(&o.BindAddress, "conversion-webhook-bind-address", "0", "Address of the Bar CRD's conversion webhook (HTTPS, path "+Path+"), served by every replica; 0 disables it. Without it, requests for Bars in a version other than the stored one fail.")
	fs.StringVar(&o.secret, "conversion-webhook-secret", "", "namespace/name of the Secret the replicas keep the webhook's certificate in (shipped empty, filled by the controller). Default: <the Pod's namespace>/"+SecretName+".")
	fs.BoolVar(&o.Only, "conversion-webhook-only", false, "Serve only the conversion webhook and the probes: watch nothing, sync nothing. For keeping conversion served while a release without a webhook runs the controller (a rollback; artifacts/conversion-only).")
	fs.StringVar(&o.certNames, "conversion-webhook-cert-names", "", "Comma-separated DNS names or IP addresses the API server calls the webhook by; the certificate is valid for each (and for the names other replicas sharing the Secret need). Default: "+ServiceName+".<namespace of the Secret>.svc and .svc.cluster.local.")
	fs.StringVar(&o.apiServerCIDRs, "conversion-webhook-api-server-cidrs", "", "Comma-separated CIDRs that only the API server calls the webhook from (e.g. the control plane's node addresses). Requests from them have no per-address share of the webhook's body budget, one largest review's room in it that no other address can take, and connections no other address can take. Empty: the API server is one address among others.")
	fs.DurationVar(&o.CertSyncPeriod, "conversion-webhook-cert-sync-period", webhookcert.DefaultPeriod, "How often each replica reads the webhook's Secret and the CRD's caBundle once its certificate is served and trusted.")
	fs.DurationVar(&o.CertGracePeriod, "conversion-webhook-cert-grace-period", webhookcert.DefaultGrace, "How long a new CA is in the CRD's caBundle before any replica serves a certificate it signed, and how long a superseded CA stays there. At least twice --conversion-webhook-cert-sync-period, so every replica reads the Secret in between.")
}

// Enabled says whether the webhook is served.
func (o *Options) Enabled() bool { return o.BindAddress != "0" && o.BindAddress != "" }

// Complete fills in the defaults that depend on where the controller runs
// (namespace: the Pod's) and refuses values the webhook could not work
// with.
func (o *Options) Complete(namespace string) error {
	if o.Only && !o.Enabled() {
		return fmt.Errorf("--conversion-webhook-only needs --conversion-webhook-bind-address")
	}
	if o.Enabled() {
		if _, _, err := net.SplitHostPort(o.BindAddress); err != nil {
			return fmt.Errorf("--conversion-webhook-bind-address %q: %w", o.BindAddress, err)
		}
	}
	if o.CertSyncPeriod <= 0 {
		return fmt.Errorf("--conversion-webhook-cert-sync-period must be positive, not %v", o.CertSyncPeriod)
	}
	if o.CertGracePeriod < 2*o.CertSyncPeriod {
		return fmt.Errorf("--conversion-webhook-cert-grace-period %v is less than twice --conversion-webhook-cert-sync-period %v: a replica could still serve a certificate when its CA leaves the caBundle", o.CertGracePeriod, o.CertSyncPeriod)
	}
	o.APIServerCIDRs = nil
	for _, c := range strings.Split(o.apiServerCIDRs, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--conversion-webhook-api-server-cidrs: %w", err)
		}
		// The listener and the budget compare a source by its IPv4
		// address: an IPv4 address mapped into IPv6 would match nothing,
		// and leave the API server unnamed while the operator thinks it
		// is (eighth review, m1).
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return fmt.Errorf("--conversion-webhook-api-server-cidrs: %s mixes IPv6 with mapped IPv4 addresses", c)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		// Wider than /8 (IPv4) or /32 (IPv6) is no control plane's range,
		// and two halves (0.0.0.0/1,128.0.0.0/1) trust every address as
		// /0 would (issue 39, seventh review, m4).
		if widest := map[bool]int{true: 8, false: 32}[p.Addr().Is4()]; p.Bits() < widest {
			return fmt.Errorf("--conversion-webhook-api-server-cidrs: %s is wider than /%d: it would trust addresses the API server does not call from, and bound none of them", c, widest)
		}
		o.APIServerCIDRs = append(o.APIServerCIDRs, p.Masked())
	}
	o.SecretNamespace, o.SecretName = namespace, SecretName
	if o.secret != "" {
		ns, name, ok := strings.Cut(o.secret, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return fmt.Errorf("--conversion-webhook-secret %q: want namespace/name", o.secret)
		}
		o.SecretNamespace, o.SecretName = ns, name
	}
	// The Service is installed beside the Secret, in the controller's
	// namespace.
	o.CertNames = []string{
		ServiceName + "." + o.SecretNamespace + ".svc",
		ServiceName + "." + o.SecretNamespace + ".svc.cluster.local",
	}
	if o.certNames != "" {
		o.CertNames = nil
		for _, n := range strings.Split(o.certNames, ",") {
			n = strings.TrimSpace(n)
			if net.ParseIP(n) == nil && len(validation.IsDNS1123Subdomain(n)) > 0 {
				return fmt.Errorf("--conversion-webhook-cert-names: %q is neither a DNS name nor an IP address", n)
			}
			o.CertNames = append(o.CertNames, n)
		}
	}
	return nil
}
