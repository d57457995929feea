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
// Replicas may need different names (a rollout that changes
// --conversion-webhook-cert-names, conversion-only replicas started with
// other flags): a replica whose names the Secret's certificate lacks
// makes one for the union of its names and the certificate's, so each
// name set is added once and the replicas converge on one certificate
// instead of replacing each other's (plan). A replica that is not the
// webhook the CRD calls (its names lack the one the API server checks),
// or that keeps another Secret than the one the CRD's bundle comes from,
// refuses: it writes nothing, is not ready, and says why (refusal).
//
// A new certificate never meets an API server that does not trust it
// (make before break): it waits as "next" until its CA has been in the
// CRD's bundle for a grace period, recorded in the Secret, and the CA it
// supersedes stays in the bundle for another grace period, so every
// replica has loaded the new pair before the old one stops being
// trusted. Then it leaves: the bundle holds the served CA, at most one
// next and, for a grace period, the superseded ones; expired CAs go at
// once.
//
// The certificates are a serving certificate signed by a CA made for it
// alone, both ECDSA P-256 (generate returns both; the CA's key is never
// kept), parsed with client-go's util/cert and util/keyutil.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
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
	// Period is how often a pass runs once the certificate is served and
	// trusted (DefaultPeriod if zero).
	Period time.Duration
	// Grace is how long a new CA is in the CRD's bundle before a
	// certificate it signed is served, and how long a superseded CA stays
	// (DefaultGrace if zero). At least a few Periods: every replica must
	// have read the Secret in between.
	Grace time.Duration

	now     func() time.Time
	current atomic.Pointer[tls.Certificate]
	// unready is why the webhook cannot be called, as the last pass
	// found; nil once it can.
	unready atomic.Pointer[error]
	started atomic.Bool // a pass has set unready
	// checked is the last pass that loaded the Secret's served pair and
	// judged it by the CRD's caBundle: that verdict holds only so long
	// (fresh), since other replicas may rotate meanwhile.
	checked atomic.Pointer[check]
}

// check is when a pass judged the served pair, and until when its
// verdict holds.
type check struct{ at, until time.Time }

// Defaults for Validity and RotateBefore: rotated after two of three
// months, so a replica that fails to rotate has a month of warnings. For
// Period and Grace: a pass a minute, and five minutes for the API servers
// to take up a new caBundle and for every replica to load a new pair.
const (
	DefaultValidity     = 90 * 24 * time.Hour
	DefaultRotateBefore = 30 * 24 * time.Hour
	DefaultPeriod       = time.Minute
	DefaultGrace        = 5 * time.Minute
)

func (k *Keeper) period() time.Duration { return cmpOr(k.Period, DefaultPeriod) }
func (k *Keeper) grace() time.Duration  { return cmpOr(k.Grace, DefaultGrace) }

func (k *Keeper) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// fresh is how long the verdict of a pass that read the Secret holds: a
// replica that cannot reach the API server keeps serving the pair it
// loaded, and must be out of the Service before another replica can
// have taken that pair's CA out of the CRD's caBundle, or the API
// server's calls to it fail the TLS handshake. plan does that no sooner
// than a grace period after a promotion, and promotes a next pair no
// sooner than a grace period after a pass first read its CA in the CRD:
// so the CA stays trusted for at least a grace period after this pass if
// it found a next pair waiting (promoted, perhaps, just after), two if
// it found none (one must be made, seen in the CRD and promoted first).
// Less a margin of half what a grace period has over a period, for the
// kubelet's readiness probes, the Service's endpoints to follow, and the
// replicas' clocks: at least 1.5 periods (Grace is at least two Periods,
// conversion.Options), so that a pass that fails, and its retries for
// half a period, take no replica out of the Service while no rotation is
// under way, and make before break holds for the one that is.
func (k *Keeper) fresh(nextWaiting bool) time.Duration {
	trusted := 2 * k.grace()
	if nextWaiting {
		trusted = k.grace()
	}
	return trusted - (k.grace()-k.period())/2
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Run reconciles until ctx ends: every Period once the certificate is
// served and trusted or the keeper refuses, every few seconds until then.
func (k *Keeper) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("webhook-cert")
	ctx = klog.NewContext(ctx, logger)
	for {
		wait := k.period()
		var refused *RefusedError
		err := k.Reconcile(ctx)
		switch {
		case errors.As(err, &refused):
			// Nothing to retry soon: another replica's configuration, or
			// this one's, must change. Said every period, where it is read.
			logger.Error(err, "Not keeping the conversion webhook's certificate")
		case err != nil:
			logger.Error(err, "Keeping the conversion webhook's certificate failed; will retry")
			wait = min(wait, 5*time.Second)
		case k.Ready() != nil:
			wait = min(wait, 2*time.Second)
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

// Ready says whether the webhook can be called: it serves a certificate
// that the CRD's bundle trusts and that is valid for the name the CRD
// calls it by. A keeper that refuses is not ready, and says why.
func (k *Keeper) Ready() error {
	if e := k.unready.Load(); e != nil {
		return *e
	}
	if !k.started.Load() {
		return errors.New("no serving certificate loaded yet")
	}
	if c := k.checked.Load(); c != nil {
		if now := k.clock(); !now.Before(c.until) {
			return fmt.Errorf("the certificate keeper has not read Secret %s/%s and CustomResourceDefinition %s since %s, %v ago: "+
				"another replica may have rotated the certificate and taken the CA of the one this replica serves out of the CRD's caBundle since "+
				"(the log says why its passes fail)",
				k.Namespace, k.SecretName, k.CRDName, c.at.UTC().Format(time.RFC3339), now.Sub(c.at).Round(time.Second))
		}
	}
	return nil
}

func (k *Keeper) setUnready(err error) {
	if err == nil {
		k.unready.Store(nil)
	} else {
		k.unready.Store(&err)
	}
	k.started.Store(true)
}

// Reconcile makes one pass: CRD, Secret, served pair, CRD bundle.
func (k *Keeper) Reconcile(ctx context.Context) error {
	result := resultError
	defer func() { checksTotal.WithLabelValues(result).Inc() }()
	now := k.clock()
	crd, err := k.Extensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, k.CRDName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading CustomResourceDefinition %s: %w", k.CRDName, err)
	}
	var crdBundle []byte
	if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
		crdBundle = c.Webhook.ClientConfig.CABundle
	}
	bundleSize.Set(float64(len(parseBundle(crdBundle))))
	ep := endpointOf(crd)
	if refused := k.refusal(crd, ep); refused != nil {
		// Before the Secret is read: a replica elsewhere may have no right
		// to it, and needs none to say why it stays out.
		result = resultRefused
		k.setUnready(refused)
		return refused
	}
	secret, err := k.Kube.CoreV1().Secrets(k.Namespace).Get(ctx, k.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("Secret %s/%s does not exist: it is part of the install manifests (artifacts/install), apply them", k.Namespace, k.SecretName)
	}
	if err != nil {
		return fmt.Errorf("reading Secret %s/%s: %w", k.Namespace, k.SecretName, err)
	}

	called := ""
	if ep != nil {
		called = ep.serverName
	}
	st, did, err := k.plan(stateOf(secret), crdBundle, called, now)
	if err != nil {
		return err
	}
	if st.applyTo(secret) {
		updated, err := k.Kube.CoreV1().Secrets(k.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			// Another replica wrote first; the next pass reads its pair.
			return fmt.Errorf("another replica updated Secret %s/%s first; reading its certificate next", k.Namespace, k.SecretName)
		}
		if err != nil {
			return fmt.Errorf("updating Secret %s/%s: %w", k.Namespace, k.SecretName, err)
		}
		writesTotal.WithLabelValues("secret").Inc()
		klog.FromContext(ctx).Info("Updated the conversion webhook's certificate", "secret", klog.KObj(updated), "changes", did)
		secret = updated
	}

	served, err := tls.X509KeyPair(secret.Data[certKey], secret.Data[keyKey])
	if err != nil {
		return fmt.Errorf("serving pair in Secret %s/%s: %w", k.Namespace, k.SecretName, err)
	}
	k.current.Store(&served)

	// Trusted by the bundle the CRD had when this pass read it, not by the
	// one it may patch in now: the API server picks a CRD's new caBundle
	// up a moment after the write (it rebuilds the CRD's handler), and
	// until then fails the TLS handshake. A first certificate is thus
	// trusted from the next pass on, a few seconds later. A promotion
	// never waits: the next pair's CA was in the bundle the grace period
	// before.
	k.checked.Store(&check{at: now, until: now.Add(k.fresh(len(secret.Data[nextCertKey]) > 0))})
	k.setUnready(k.callable(secret.Data[certKey], crdBundle, ep))
	result = resultReady
	if k.Ready() != nil {
		result = resultWaiting
	}
	if bundle := secret.Data[bundleKey]; !bytes.Equal(crdBundle, bundle) || !k.claimed(crd, ep) {
		if err := k.patchCRD(ctx, crd, ep, bundle); err != nil {
			result = resultError
			return err
		}
	}
	return nil
}

// callable says why the API server cannot call a replica serving certPEM
// yet, or nil if it can.
func (k *Keeper) callable(certPEM, crdBundle []byte, ep *endpoint) error {
	ca, err := caOf(certPEM)
	switch {
	case err != nil:
		return err
	case !trusts(crdBundle, ca):
		return fmt.Errorf("the caBundle of CustomResourceDefinition %s does not trust the serving certificate yet", k.CRDName)
	case ep != nil && leafOf(certPEM).VerifyHostname(ep.serverName) != nil:
		// The Secret's pair was made for other names: the next one is
		// for this replica's too, and is served as soon as the CRD
		// carries its CA (plan).
		return fmt.Errorf("the serving certificate is not valid for %s, the name CustomResourceDefinition %s calls the webhook by, yet: the next one is, once the CRD's caBundle carries its CA", ep.serverName, k.CRDName)
	}
	return nil
}

// patchCRD sets the CRD's caBundle to bundle and its annotations to name
// this keeper's Secret, in one merge patch.
func (k *Keeper) patchCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, ep *endpoint, bundle []byte) error {
	id := ""
	if ep != nil {
		id = ep.id
	}
	// With the resourceVersion read: a bundle another replica changed
	// since is not replaced unseen (a Conflict, and the next pass reads
	// it), so a replica that read an older Secret never puts an older
	// bundle back.
	patch := map[string]any{"metadata": map[string]any{"resourceVersion": crd.ResourceVersion,
		"annotations": map[string]string{BundleSecretAnnotation: k.secretRef(), BundleEndpointAnnotation: id}}}
	var old []byte
	if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
		old = c.Webhook.ClientConfig.CABundle
	}
	if !bytes.Equal(old, bundle) {
		patch["spec"] = map[string]any{"conversion": map[string]any{
			"webhook": map[string]any{"clientConfig": map[string]any{"caBundle": bundle}}}}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = k.Extensions.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, k.CRDName, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("another replica changed CustomResourceDefinition %s first; reading it next", k.CRDName)
	}
	if err != nil {
		return fmt.Errorf("setting the caBundle of CustomResourceDefinition %s: %w", k.CRDName, err)
	}
	writesTotal.WithLabelValues("crd").Inc()
	klog.FromContext(ctx).Info("Updated the conversion webhook's CA bundle", "crd", k.CRDName, "certificates", len(parseBundle(bundle)), "secret", k.secretRef())
	return nil
}
