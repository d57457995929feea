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
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// TLSConfig returns the server side of HTTPS for an endpoint. With certDir
// empty, it makes a self-signed certificate for this process: traffic is
// encrypted, and a scraper that trusts the endpoint by its Kubernetes
// identity (the bearer token check) rather than its certificate, as
// kubebuilder's default Prometheus configuration does, works unchanged.
// With certDir, it serves certDir/tls.crt and tls.key, the layout of a
// kubernetes.io/tls Secret, and picks up a renewed pair (cert-manager
// rotates them in place) on the next handshake after the files change.
func TLSConfig(certDir, host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certDir == "" {
		pair, err := selfSigned(host, time.Now())
		if err != nil {
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		return cfg, nil
	}
	r := &pairReloader{cert: filepath.Join(certDir, "tls.crt"), key: filepath.Join(certDir, "tls.key")}
	if _, err := r.get(nil); err != nil {
		return nil, err
	}
	cfg.GetCertificate = r.get
	return cfg, nil
}

// selfSigned makes a certificate for host signed by its own key, ECDSA
// P-256, which takes well under a millisecond to make. client-go's
// cert.GenerateSelfSignedCertKey, used before, makes two RSA-2048 keys (a
// CA's and the certificate's): 5–8 % of the controller's CPU in a
// cold start of 2,000 Bars, for a certificate nobody verifies. Valid, as
// that one was, for a year; from an hour ago, for clocks behind this one.
func selfSigned(host string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", host, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// pairReloader serves a certificate and key from files, reloading them
// when either file's modification time changes.
type pairReloader struct {
	cert, key string

	mu      sync.Mutex
	modTime [2]time.Time
	pair    *tls.Certificate
}

func (r *pairReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var mod [2]time.Time
	for i, p := range []string{r.cert, r.key} {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		mod[i] = info.ModTime()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pair != nil && mod == r.modTime {
		return r.pair, nil
	}
	pair, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.pair != nil {
			// Half-written during a rotation: keep serving the old pair.
			return r.pair, nil
		}
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	r.pair, r.modTime = &pair, mod
	return r.pair, nil
}
