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

package e2e

import (
	"cmp"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/cert"
)

// keeperHistory records every version of the Secret and the CRD that the
// API server's watch delivers from its start: each write is one event,
// none coalesced, so the counts are exact.
type keeperHistory struct {
	mu      sync.Mutex
	secrets []seen[*corev1.Secret]
	crds    []seen[*apiextensionsv1.CustomResourceDefinition]
	err     error
	stop    func()
	// The versions the watches started after.
	secret0 *corev1.Secret
	crd0    *apiextensionsv1.CustomResourceDefinition
}

// seen is a version and when the watch delivered it.
type seen[T any] struct {
	obj T
	at  time.Time
}

// watchKeeper records the Secret's and the CRD's versions after the ones
// read now.
func watchKeeper(t *testing.T, env *opsEnv, secretNS string) *keeperHistory {
	t.Helper()
	st, err := readKeeperState(t.Context(), env, secretNS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &keeperHistory{secret0: st.secret, crd0: st.crd}
	ext := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
	secretWatch, err := env.kube.CoreV1().Secrets(secretNS).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + webhookSecret, ResourceVersion: st.secret.ResourceVersion, TimeoutSeconds: new(int64(600))})
	if err != nil {
		t.Fatal(err)
	}
	crdWatch, err := ext.ApiextensionsV1().CustomResourceDefinitions().Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + barsCRD, ResourceVersion: st.crd.ResourceVersion, TimeoutSeconds: new(int64(600))})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	record := func(w watch.Interface, add func(any)) {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				h.mu.Lock()
				switch {
				case !ok:
					h.err = fmt.Errorf("a watch ended early: the counts are incomplete")
				case ev.Type != watch.Modified:
					h.err = fmt.Errorf("a watch delivered %s %T, want only modifications", ev.Type, ev.Object)
				default:
					add(ev.Object)
				}
				h.mu.Unlock()
				if !ok {
					return
				}
			}
		}
	}
	wg.Go(func() {
		record(secretWatch, func(o any) { h.secrets = append(h.secrets, seen[*corev1.Secret]{o.(*corev1.Secret), time.Now()}) })
	})
	wg.Go(func() {
		record(crdWatch, func(o any) {
			h.crds = append(h.crds, seen[*apiextensionsv1.CustomResourceDefinition]{o.(*apiextensionsv1.CustomResourceDefinition), time.Now()})
		})
	})
	h.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(h.stop)
	return h
}

// counts returns the Secret's writes, the CRD's caBundle changes (the
// generations it went through: caBundle is in its spec) and the most CAs
// the CRD's bundle held, after the first n Secret and m CRD versions.
func (h *keeperHistory) counts(t *testing.T, n, m int) (secretWrites, bundleChanges, maxCAs int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		t.Fatal(h.err)
	}
	gen := h.crd0.Generation
	for i, c := range h.crds {
		if i < m {
			gen = c.obj.Generation
			continue
		}
		if c.obj.Generation != gen {
			bundleChanges++
			gen = c.obj.Generation
		}
		maxCAs = max(maxCAs, countCAs(crdBundle(c.obj)))
	}
	return len(h.secrets) - n, bundleChanges, maxCAs
}

// marks returns how many versions have been recorded so far, for counts.
func (h *keeperHistory) marks() (secrets, crds int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.secrets), len(h.crds)
}

// summary is a line for a failure message: the writes seen so far and the
// bundle's size after each CRD version.
func (h *keeperHistory) summary() string {
	if h == nil {
		return "no history recorded"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var sizes []string
	for _, c := range h.crds {
		sizes = append(sizes, fmt.Sprint(countCAs(crdBundle(c.obj))))
	}
	return fmt.Sprintf("%d Secret writes, %d CRD versions, caBundle sizes [%s]", len(h.secrets), len(h.crds), strings.Join(sizes, " "))
}

// Annotations the keeper records its schedule in, on the Secret.
const promoteAfterKey = "webhookcert.barcontroller.dev/promote-next-after"

// servedCAOf is the CA of the Secret's served pair, or nil.
func servedCAOf(s *corev1.Secret) *x509.Certificate {
	certs, err := cert.ParseCertsPEM(s.Data["tls.crt"])
	if err != nil || len(certs) < 2 {
		return nil
	}
	return certs[1]
}

func bundleHas(bundle []byte, ca *x509.Certificate) bool {
	certs, err := cert.ParseCertsPEM(bundle)
	return err == nil && slices.ContainsFunc(certs, ca.Equal)
}

// deliverySlack is what the order of two watches' deliveries may be off
// by: both come from the same API server's watch cache, a few
// milliseconds after the write; 250 ms is tens of times that.
const deliverySlack = 250 * time.Millisecond

// checkMakeBeforeBreak checks every promotion the history holds (the
// Secret's served CA changing from one to another): the CRD's caBundle
// carried the new CA at least the grace period before the Secret served
// it, the Secret recorded when it could be promoted and it was not
// promoted earlier, and the old CA left the bundle only a grace period
// after the promotion. It returns the number of promotions.
func (h *keeperHistory) checkMakeBeforeBreak(t *testing.T) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	promotions := 0
	prev, prevSecret := servedCAOf(h.secret0), h.secret0
	for _, v := range h.secrets {
		ca := servedCAOf(v.obj)
		if ca == nil || prev == nil || ca.Equal(prev) {
			prev, prevSecret = cmp.Or(ca, prev), v.obj
			continue
		}
		promotions++
		trusted := slices.IndexFunc(h.crds, func(c seen[*apiextensionsv1.CustomResourceDefinition]) bool {
			return bundleHas(crdBundle(c.obj), ca)
		})
		switch {
		case trusted < 0 && !bundleHas(crdBundle(h.crd0), ca):
			t.Errorf("CA %s served with no CRD version carrying it", fingerprint(ca))
		case trusted >= 0 && v.at.Sub(h.crds[trusted].at) < keeperGrace-deliverySlack:
			t.Errorf("CA %s served %v after the CRD first carried it, want at least the grace period, %v",
				fingerprint(ca), v.at.Sub(h.crds[trusted].at), keeperGrace)
		}
		after, err := time.Parse(time.RFC3339Nano, prevSecret.Annotations[promoteAfterKey])
		if err != nil {
			t.Errorf("the Secret before CA %s was served recorded no time to promote it (%s: %v)", fingerprint(ca), promoteAfterKey, err)
		} else if v.at.Before(after) {
			t.Errorf("CA %s served at %v, before the %v the Secret recorded", fingerprint(ca), v.at, after)
		}
		retired := slices.IndexFunc(h.crds, func(c seen[*apiextensionsv1.CustomResourceDefinition]) bool {
			return c.at.After(v.at.Add(-deliverySlack)) && !bundleHas(crdBundle(c.obj), prev)
		})
		if retired >= 0 && h.crds[retired].at.Sub(v.at) < keeperGrace-deliverySlack {
			t.Errorf("the superseded CA %s left the bundle %v after the promotion, want at least the grace period, %v",
				fingerprint(prev), h.crds[retired].at.Sub(v.at), keeperGrace)
		}
		prev, prevSecret = ca, v.obj
	}
	return promotions
}
