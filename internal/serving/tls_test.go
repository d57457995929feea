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

package serving

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
)

// serveAndGetCN serves over TLS with cfg and returns the common name of the
// certificate a client is shown.
func serveAndGetCN(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	stop, addr := serveOnFreePort(t, cfg)
	defer stop()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the test reads the certificate, it does not trust it
	resp, err := client.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.TLS.PeerCertificates[0].Subject.CommonName
}

func serveOnFreePort(t *testing.T, cfg *tls.Config) (func(), string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// Serve logs the address it listens on; the listener is not returned,
	// so find a free port first.
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	stop, err := Serve(t.Context(), "test", addr, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return stop, addr
}

func TestTLSConfigSelfSigned(t *testing.T) {
	cfg, err := TLSConfig("", "bar-controller-metrics")
	if err != nil {
		t.Fatal(err)
	}
	if cn := serveAndGetCN(t, cfg); !strings.HasPrefix(cn, "bar-controller-metrics@") {
		t.Errorf("served %q, want the self-signed certificate", cn)
	}
}

// TestSelfSigned: an ECDSA key (made in microseconds, not an RSA key's
// tens of milliseconds), the host as a DNS name or an IP address, a year's
// validity from an hour back, for serving only, and signed by its own key.
func TestSelfSigned(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	for host, check := range map[string]func(*x509.Certificate) bool{
		"bar-controller-metrics": func(c *x509.Certificate) bool { return slices.Equal(c.DNSNames, []string{"bar-controller-metrics"}) },
		"127.0.0.1": func(c *x509.Certificate) bool {
			return len(c.IPAddresses) == 1 && c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1))
		},
	} {
		pair, err := selfSigned(host, now)
		if err != nil {
			t.Fatal(err)
		}
		c := pair.Leaf
		if _, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok {
			t.Errorf("%s: a %T key", host, pair.PrivateKey)
		}
		if !check(c) {
			t.Errorf("%s: DNS names %v, IP addresses %v", host, c.DNSNames, c.IPAddresses)
		}
		if !c.NotBefore.Equal(now.Add(-time.Hour)) || !c.NotAfter.Equal(now.Add(365*24*time.Hour)) {
			t.Errorf("%s: valid %v to %v", host, c.NotBefore, c.NotAfter)
		}
		if c.IsCA || !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
			t.Errorf("%s: CA %v, extended key usage %v", host, c.IsCA, c.ExtKeyUsage)
		}
		if err := c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
			t.Errorf("%s: not signed by its own key: %v", host, err)
		}
	}
}

// TestTLSConfigReloads replaces the files the way a Secret update does and
// checks that the next connection gets the new certificate.
func TestTLSConfigReloads(t *testing.T) {
	dir := t.TempDir()
	write := func(host string, mod time.Time) {
		certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mod, mod); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now()
	write("first", now.Add(-time.Hour))
	cfg, err := TLSConfig(dir, "unused")
	if err != nil {
		t.Fatal(err)
	}
	if cn := serveAndGetCN(t, cfg); !strings.HasPrefix(cn, "first@") {
		t.Errorf("served %q, want the first certificate", cn)
	}
	write("second", now)
	if cn := serveAndGetCN(t, cfg); !strings.HasPrefix(cn, "second@") {
		t.Errorf("served %q after the files changed, want the second certificate", cn)
	}

	if _, err := TLSConfig(t.TempDir(), "unused"); err == nil {
		t.Errorf("an empty certificate directory was accepted")
	}
}
