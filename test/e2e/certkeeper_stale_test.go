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
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// TestCertKeeperCutOffReplicaGoesUnready: a conversion-only replica,
// "cut", reaches the API server through a proxy the test controls. It
// settles and is ready; then the proxy drops all of its connections and
// refuses new ones, and a second replica, with one name more (a rollout
// that adds one), rotates the certificate: a next pair, promoted a grace
// period after the CRD carried its CA, the old CA retired a grace period
// later. Throughout, whenever "cut" says it is ready, it serves a
// certificate the CRD's caBundle of that moment trusts, the TLS handshake
// the API server would make; it goes unready only after some of its
// passes have failed, and says why; once the proxy lets it through again
// it is ready, serving the new certificate.
//
// Before the fix it stayed ready after its CA had left the caBundle:
// every review the Service sent it would have failed the handshake.
func TestCertKeeperCutOffReplicaGoesUnready(t *testing.T) {
	env := startCertEnv(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	proxy := startAPIProxy(t, strings.TrimPrefix(env.cluster.Server, "https://"))
	proxied := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + proxy.addr()
	}
	if err := clientcmd.WriteToFile(*cfg, proxied); err != nil {
		t.Fatal(err)
	}

	// The CRD as shipped calls the Service bar-controller/bar-controller-
	// webhook, so by this name; the test makes the calls itself.
	const called = "bar-controller-webhook.bar-controller.svc"
	flags := slices.Concat(keeperFlags, []string{"--conversion-webhook-only",
		"--conversion-webhook-secret=" + installNamespace + "/" + webhookSecret})
	cut := startKeeperReplica(t, "cut", proxied, "", []string{called}, flags...)
	waitSettled(t, env, installNamespace, time.Now(), nil, cut)
	st, err := readKeeperState(t.Context(), env, installNamespace)
	if err != nil {
		t.Fatal(err)
	}
	first := servedCAOf(st.secret)

	h := watchKeeper(t, env, installNamespace)
	proxy.cut()
	failedBefore := cut.keeperErrors(t)
	startKeeperReplica(t, "rotating", kubeconfig, "", []string{called, "bar-controller-webhook.bar-controller"}, flags...)

	// Until "cut" is unready and its CA has left the bundle. The bundle is
	// read before the probe: a ready answer given after it is one the
	// bundle of that moment must bear out.
	var unreadyWhy string
	var failedBy float64
	retired := false
	eventually(t, "the cut-off replica to go unready and its CA to leave the caBundle", func(ctx context.Context) (bool, error) {
		st, err := readKeeperState(ctx, env, installNamespace)
		if err != nil {
			return false, err
		}
		bundle := crdBundle(st.crd)
		retired = retired || !bundleHas(bundle, first)
		code, why := cut.readyzBody()
		switch {
		case code == 200:
			if _, err := served(cut.addr, called, bundle); err != nil {
				return false, fmt.Errorf("the cut-off replica is ready, but a client trusting the CRD's caBundle cannot call it (its CA left the bundle: %v): %w; %s",
					retired, err, h.summary())
			}
		case code == 503 && unreadyWhy == "":
			unreadyWhy = why
			failedBy = cut.keeperErrors(t) - failedBefore
		}
		return unreadyWhy != "" && retired, nil
	})
	t.Logf("the cut-off replica went unready after %v failed passes: %s", failedBy, unreadyWhy)
	if failedBy < 2 {
		t.Errorf("the cut-off replica went unready after %v failed passes, want more than one (make before break)", failedBy)
	}
	if !strings.Contains(unreadyWhy, "has not read Secret") {
		t.Errorf("the cut-off replica's /readyz says %q, want why: its keeper has not read the Secret for too long", unreadyWhy)
	}

	proxy.restore(t)
	cut.waitProbe(t, "/readyz", 200)
	st, err = readKeeperState(t.Context(), env, installNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := served(cut.addr, called, crdBundle(st.crd)); err != nil || got.Equal(first) {
		t.Errorf("the replica, back and ready, serves the old certificate (%v) or cannot be called: %v", got != nil && got.Equal(first), err)
	}
}

// keeperErrors is how many of the replica's keeper passes have failed.
func (r keeperReplica) keeperErrors(t *testing.T) float64 {
	t.Helper()
	v, _ := r.scrape(t).Value("bar_controller_conversion_webhook_certificate_checks_total", map[string]string{"result": "error"})
	return v
}

// apiProxy forwards TCP connections to the API server until cut: then
// it closes every connection it carries and its listener, so that new
// ones are refused, as from a replica whose node lost its route to the
// API server; until restored, listening on the same address again.
// Refused, not accepted and closed: client-go retries a GET whose
// connection was reset, for seconds, but not one that was refused, so
// the keeper's passes fail as soon as they start.
type apiProxy struct {
	address, target string
	wg              sync.WaitGroup
	mu              sync.Mutex
	l               net.Listener // nil while cut
	conns           map[net.Conn]bool
}

func startAPIProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	p := &apiProxy{target: target, conns: map[net.Conn]bool{}}
	if err := p.listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *apiProxy) addr() string { return p.address }

func (p *apiProxy) listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.l, p.address = l, l.Addr().String()
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			p.wg.Go(func() { p.forward(l, c) })
		}
	})
	return nil
}

// forward carries c to the API server while l, the listener that
// accepted it, is the one open.
func (p *apiProxy) forward(l net.Listener, c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.l != l {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *apiProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

func (p *apiProxy) restore(t *testing.T) {
	t.Helper()
	if err := p.listen(p.address); err != nil {
		t.Fatalf("listening on %s again: %v", p.address, err)
	}
}
