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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
)

var testNames = []string{"bar-controller-webhook.bar-controller.svc", "bar-controller-webhook.bar-controller.svc.cluster.local", "10.0.0.1"}

// generate's pair: ECDSA P-256 keys, the serving certificate for every
// name, signed by the CA after it, valid for validity from an hour ago.
// Before, client-go made RSA-2048 keys (issue 39, sixth review, m2).
func TestGenerate(t *testing.T) {
	certPEM, keyPEM, err := generate(testNames, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePair(certPEM, keyPEM, time.Now())
	if err != nil {
		t.Fatalf("parsePair of a generated pair: %v", err)
	}
	for _, c := range []*x509.Certificate{p.leaf, p.ca} {
		k, ok := c.PublicKey.(*ecdsa.PublicKey)
		if !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", c.Subject.CommonName, c.PublicKey)
		}
		if d := c.NotAfter.Sub(c.NotBefore); d != 24*time.Hour {
			t.Errorf("%s: valid for %v, want 24h", c.Subject.CommonName, d)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	for _, name := range testNames {
		if _, err := p.leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil && net.ParseIP(name) == nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := p.leaf.VerifyHostname(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// What one TLS handshake costs the server, with generate's certificate
// and, as the floor it is measured against in the same run, with the
// RSA-2048 one client-go's GenerateSelfSignedCertKeyWithOptions makes:
// go test -run '^$' -bench Handshake ./internal/webhookcert.
func BenchmarkHandshake(b *testing.B) {
	ecPEM, ecKey, err := generate(testNames, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	rsaPEM, rsaKey, err := cert.GenerateSelfSignedCertKeyWithOptions(cert.SelfSignedCertKeyOptions{Host: testNames[0], MaxAge: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
	}{{"ecdsa-p256", ecPEM, ecKey}, {"rsa-2048", rsaPEM, rsaKey}} {
		pair, err := tls.X509KeyPair(tc.cert, tc.key)
		if err != nil {
			b.Fatal(err)
		}
		server := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		client := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the server's cost is measured, not its identity
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				c, s := net.Pipe()
				done := make(chan error, 1)
				go func() { done <- tls.Client(c, client).Handshake() }()
				if err := tls.Server(s, server).Handshake(); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				c.Close()
				s.Close()
			}
		})
	}
}
