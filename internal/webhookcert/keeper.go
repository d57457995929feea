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

// Package webhookcert keeps the conversion webhook's serving certificate,
// with nothing installed in the cluster but bar-controller itself: no
// cert-manager, no service CA operator.
//
// The API server calls the webhook over HTTPS and trusts it by the CA
// bundle in the CustomResourceDefinition (spec.conversion.webhook.
// clientConfig.caBundle). Every replica serves the webhook, so all must
// serve one certificate the bundle trusts. They share it through one
// Secret, shipped empty with the install manifests, and coordinate by the
// Secret's resourceVersion: whoever writes first wins, the others get a
// conflict and read what won. Every replica then copies the Secret's CA
// bundle into the CRD. The RBAC is exactly that: get and update of one
// Secret, get and patch of one CRD, both by name.
//
// A rotation must never leave the API server facing a certificate it does
// not trust, so it takes two steps a reconcile apart. First a new pair is
// made and kept beside the current one as "next", and its CA joins the
// bundle; only once the CRD carries that bundle is next promoted to the
// served pair. The old CA stays in the bundle until it expires, so a
// replica that still serves the old pair for a minute stays trusted.
//
// The certificates come from client-go's util/cert: a serving certificate
// signed by a CA made for it alone (GenerateSelfSignedCertKeyWithOptions
// returns both, the CA's key is never kept), parsed with util/cert and
// util/keyutil.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// Keys of the Secret.
const (
	certKey     = corev1.TLSCertKey       // the served certificate, then its CA
	keyKey      = corev1.TLSPrivateKeyKey // its private key
	bundleKey   = "ca.crt"                // every CA the API server must trust
	nextCertKey = "next.crt"              // a rotation's new pair, not served yet
	nextKeyKey  = "next.key"
)

// Keeper keeps the serving certificate in the Secret and its CAs in the
// CRD, and serves it (GetCertificate).
type Keeper struct {
	Kube       kubernetes.Interface
	Extensions apiextensionsclient.Interface
	// Namespace and SecretName name the shared Secret; CRDName the CRD.
	Namespace, SecretName, CRDName string
	// Names are the names the API server calls the webhook by: the
	// Service's DNS names, service.namespace.svc first, or IP addresses
	// (127.0.0.1 when the controller runs on the API server's machine, as
	// in make run). At least one.
	Names []string
	// Validity is how long a certificate is valid; RotateBefore how long
	// before its end a new one takes over.
	Validity, RotateBefore time.Duration

	now     func() time.Time
	current atomic.Pointer[tls.Certificate]
	trusted atomic.Bool // the CRD's bundle trusts the served certificate's CA
}

// Defaults for Validity and RotateBefore: rotated after two of three
// months, so a replica that fails to rotate has a month of warnings.
const (
	DefaultValidity     = 90 * 24 * time.Hour
	DefaultRotateBefore = 30 * 24 * time.Hour
)

// Run reconciles until ctx ends: every few seconds until the certificate
// is served and trusted, then every minute.
func (k *Keeper) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("webhook-cert")
	for {
		wait := time.Minute
		if err := k.Reconcile(ctx); err != nil {
			logger.Error(err, "Keeping the conversion webhook's certificate failed; will retry")
			wait = 5 * time.Second
		} else if k.Ready() != nil {
			wait = 2 * time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// GetCertificate is the tls.Config callback serving the current pair.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := k.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Ready says whether the webhook can be called: it has a certificate and
// the CRD's bundle trusts it.
func (k *Keeper) Ready() error {
	switch {
	case k.current.Load() == nil:
		return errors.New("no serving certificate loaded yet")
	case !k.trusted.Load():
		return fmt.Errorf("the caBundle of CustomResourceDefinition %s does not trust the serving certificate yet", k.CRDName)
	}
	return nil
}

// Reconcile makes one pass: Secret, served pair, CRD bundle.
func (k *Keeper) Reconcile(ctx context.Context) error {
	now := time.Now()
	if k.now != nil {
		now = k.now()
	}
	crd, err := k.Extensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, k.CRDName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading CustomResourceDefinition %s: %w", k.CRDName, err)
	}
	var crdBundle []byte
	if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
		crdBundle = c.Webhook.ClientConfig.CABundle
	}
	secret, err := k.Kube.CoreV1().Secrets(k.Namespace).Get(ctx, k.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("Secret %s/%s does not exist: it is part of the install manifests (artifacts/install), apply them", k.Namespace, k.SecretName)
	}
	if err != nil {
		return fmt.Errorf("reading Secret %s/%s: %w", k.Namespace, k.SecretName, err)
	}

	data, changed, err := k.plan(secret.Data, crdBundle, now)
	if err != nil {
		return err
	}
	if changed {
		secret.Data = data
		updated, err := k.Kube.CoreV1().Secrets(k.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			// Another replica wrote first; the next pass reads its pair.
			return fmt.Errorf("another replica updated Secret %s/%s first; reading its certificate next", k.Namespace, k.SecretName)
		}
		if err != nil {
			return fmt.Errorf("updating Secret %s/%s: %w", k.Namespace, k.SecretName, err)
		}
		klog.FromContext(ctx).Info("Updated the conversion webhook's certificate", "secret", klog.KObj(updated))
		secret = updated
	}

	pair, err := tls.X509KeyPair(secret.Data[certKey], secret.Data[keyKey])
	if err != nil {
		return fmt.Errorf("serving pair in Secret %s/%s: %w", k.Namespace, k.SecretName, err)
	}
	k.current.Store(&pair)

	// Trusted by the bundle the CRD had when this pass read it, not by the
	// one it may patch in now: the API server picks a CRD's new caBundle
	// up a moment after the write (it rebuilds the CRD's handler), and
	// until then fails the TLS handshake. A first certificate is thus
	// trusted from the next pass on, a few seconds later. A rotation
	// never waits: the served pair's CA was in the bundle before the pass
	// that added the next one, and the next pair is served only once a
	// pass has read its CA in the CRD.
	ca, _ := caOf(secret.Data[certKey])
	k.trusted.Store(ca != nil && trusts(crdBundle, ca))
	if bundle := secret.Data[bundleKey]; !bytes.Equal(crdBundle, bundle) {
		if err := k.patchBundle(ctx, bundle); err != nil {
			return err
		}
	}
	return nil
}

// plan returns what the Secret should hold, and whether that differs from
// data. It is a pure function of the Secret, the CRD's bundle and the time.
func (k *Keeper) plan(data map[string][]byte, crdBundle []byte, now time.Time) (map[string][]byte, bool, error) {
	out := map[string][]byte{}
	for key, v := range data {
		out[key] = v
	}
	cur, curErr := k.usable(out[certKey], out[keyKey], now)
	next, nextErr := k.usable(out[nextCertKey], out[nextKeyKey], now)
	switch {
	case curErr != nil:
		// Nothing usable is served (a first start, or everything expired):
		// there is no trust to keep, so a new pair is served at once.
		certPEM, keyPEM, err := k.generate()
		if err != nil {
			return nil, false, err
		}
		out[certKey], out[keyKey] = certPEM, keyPEM
		delete(out, nextCertKey)
		delete(out, nextKeyKey)
	case nextErr == nil && trusts(crdBundle, next):
		// Step two of a rotation: the CRD trusts the next pair's CA.
		out[certKey], out[keyKey] = out[nextCertKey], out[nextKeyKey]
		delete(out, nextCertKey)
		delete(out, nextKeyKey)
	case nextErr != nil && now.After(cur.NotAfter.Add(-k.RotateBefore)):
		// Step one: a new pair beside the served one.
		certPEM, keyPEM, err := k.generate()
		if err != nil {
			return nil, false, err
		}
		out[nextCertKey], out[nextKeyKey] = certPEM, keyPEM
	}
	out[bundleKey] = bundleOf(now, out[bundleKey], out[certKey], out[nextCertKey])
	changed := len(out) != len(data)
	for key, v := range out {
		if !bytes.Equal(data[key], v) {
			changed = true
		}
	}
	return out, changed, nil
}

// usable returns the CA of a pair that parses, matches, is valid at now
// and is valid for every name, as the API server's TLS client checks it;
// an error says why not.
func (k *Keeper) usable(certPEM, keyPEM []byte, now time.Time) (*x509.Certificate, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, errors.New("empty")
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	if _, err := keyutil.ParsePrivateKeyPEM(keyPEM); err != nil {
		return nil, err
	}
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, err
	}
	leaf := certs[0]
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("valid from %v to %v", leaf.NotBefore, leaf.NotAfter)
	}
	for _, name := range k.Names {
		// VerifyHostname matches an IP address against the IP SANs and
		// anything else against the DNS SANs: what a TLS client does.
		if err := leaf.VerifyHostname(name); err != nil {
			return nil, err
		}
	}
	return caOf(certPEM)
}

func (k *Keeper) generate() ([]byte, []byte, error) {
	if len(k.Names) == 0 {
		return nil, nil, errors.New("no names for the webhook's certificate")
	}
	// The first name is the Host (util/cert puts it in the IP or DNS SANs,
	// as it parses), the others go where they belong by the same rule.
	opts := cert.SelfSignedCertKeyOptions{Host: k.Names[0], MaxAge: k.Validity}
	for _, name := range k.Names[1:] {
		if ip := net.ParseIP(name); ip != nil {
			opts.AlternateIPs = append(opts.AlternateIPs, ip)
		} else {
			opts.AlternateDNS = append(opts.AlternateDNS, name)
		}
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKeyWithOptions(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("making the webhook's certificate: %w", err)
	}
	return certPEM, keyPEM, nil
}

// caOf returns the CA that GenerateSelfSignedCertKeyWithOptions puts after
// the serving certificate, with its validity.
func caOf(certPEM []byte) (*x509.Certificate, error) {
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) < 2 || !certs[1].IsCA {
		return nil, errors.New("no CA certificate after the serving certificate")
	}
	return certs[1], nil
}

// bundleOf returns the CAs of the served and next pairs, and the CAs of
// the old bundle that have not expired, once each, oldest first.
func bundleOf(now time.Time, old []byte, pairs ...[]byte) []byte {
	var cas []*x509.Certificate
	if certs, err := cert.ParseCertsPEM(old); err == nil {
		cas = append(cas, certs...)
	}
	for _, p := range pairs {
		if ca, err := caOf(p); err == nil {
			cas = append(cas, ca)
		}
	}
	var keep []*x509.Certificate
	for _, ca := range cas {
		if now.Before(ca.NotAfter) && !slices.ContainsFunc(keep, ca.Equal) {
			keep = append(keep, ca)
		}
	}
	slices.SortStableFunc(keep, func(a, b *x509.Certificate) int { return a.NotBefore.Compare(b.NotBefore) })
	out, _ := cert.EncodeCertificates(keep...)
	return out
}

func trusts(bundle []byte, ca *x509.Certificate) bool {
	certs, err := cert.ParseCertsPEM(bundle)
	return err == nil && slices.ContainsFunc(certs, ca.Equal)
}

func (k *Keeper) patchBundle(ctx context.Context, bundle []byte) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"conversion": map[string]any{
		"webhook": map[string]any{"clientConfig": map[string]any{"caBundle": bundle}}}}})
	if err != nil {
		return err
	}
	_, err = k.Extensions.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, k.CRDName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("setting the caBundle of CustomResourceDefinition %s: %w", k.CRDName, err)
	}
	klog.FromContext(ctx).Info("Updated the conversion webhook's CA bundle", "crd", k.CRDName)
	return nil
}
