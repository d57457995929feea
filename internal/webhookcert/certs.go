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
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// pair is a parsed serving pair: the certificate a TLS client checks, and
// the CA that signed it, which the bundle must hold.
type pair struct {
	certPEM, keyPEM []byte
	leaf, ca        *x509.Certificate
}

// parsePair returns the pair if it parses, its key matches, it carries
// its CA and both are valid at now; an error says why not.
func parsePair(certPEM, keyPEM []byte, now time.Time) (*pair, error) {
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
	ca, err := caOf(certPEM)
	if err != nil {
		return nil, err
	}
	for _, c := range []*x509.Certificate{certs[0], ca} {
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			return nil, fmt.Errorf("valid from %v to %v", c.NotBefore, c.NotAfter)
		}
	}
	return &pair{certPEM: certPEM, keyPEM: keyPEM, leaf: certs[0], ca: ca}, nil
}

// leafOf returns the serving certificate of certPEM however old, or nil:
// the names of an expired certificate are still the names it was for.
func leafOf(certPEM []byte) *x509.Certificate {
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return nil
	}
	return certs[0]
}

// covers says whether leaf is valid for every name, as a TLS client
// checks it: VerifyHostname matches an IP address against the IP SANs and
// anything else against the DNS SANs.
func covers(leaf *x509.Certificate, names []string) bool {
	for _, n := range names {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// namesOf returns the names leaf is valid for: its DNS SANs, then its IP
// SANs. Nil for nil.
func namesOf(leaf *x509.Certificate) []string {
	if leaf == nil {
		return nil
	}
	out := slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// union returns the names of every list once, in order of first
// appearance: DNS names compared without case, IP addresses by value
// (::1 and 0:0::1 are one).
func union(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, n := range l {
			key := strings.ToLower(n)
			if ip := net.ParseIP(n); ip != nil {
				key = ip.String()
			}
			if !seen[key] {
				seen[key] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// sameName says whether a and b are one name, as union compares them.
func sameName(a, b string) bool {
	if ipA, ipB := net.ParseIP(a), net.ParseIP(b); ipA != nil || ipB != nil {
		return ipA != nil && ipB != nil && ipA.Equal(ipB)
	}
	return strings.EqualFold(a, b)
}

// generate makes a pair for names with a CA of its own, valid for
// validity from an hour ago (clock skew between the replicas and the API
// server): the serving certificate, then its CA, in certPEM. The keys are
// ECDSA P-256, not the RSA-2048 of client-go's
// GenerateSelfSignedCertKeyWithOptions used before: a TLS handshake signs
// with the serving key, and anyone who reaches the webhook can start
// handshakes, which no bound here limits. A handshake, both ends in one
// process, took 1.1 ms with P-256 and 2.3 ms with RSA-2048 in one run
// (BenchmarkHandshake in certs_test.go), so a Pod's handshake flood takes
// about half as much of the CPU the leader renews its Lease with (issue
// 39, sixth review, m2).
// The API server verifies either.
func generate(names []string, validity time.Duration) ([]byte, []byte, error) {
	if len(names) == 0 {
		return nil, nil, errors.New("no names for the webhook's certificate")
	}
	validFrom := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("making the webhook's CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", names[0], time.Now().Unix())},
		NotBefore:             validFrom,
		NotAfter:              validFrom.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("making the webhook's CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("making the webhook's key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", names[0], time.Now().Unix())},
		NotBefore:             validFrom,
		NotAfter:              validFrom.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, name := range names {
		if ip := net.ParseIP(name); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, name)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("making the webhook's certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM := append(pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: caDER})...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// serialNumber is a random serial in [1, 2^63).
func serialNumber() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).SetInt64(math.MaxInt64-1))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}

// caOf returns the CA that generate puts after the serving certificate.
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

// parseBundle returns the certificates of a PEM bundle; none if it does
// not parse (an empty bundle, or one damaged by hand, which the next
// write replaces).
func parseBundle(bundle []byte) []*x509.Certificate {
	certs, err := cert.ParseCertsPEM(bundle)
	if err != nil {
		return nil
	}
	return certs
}

func trusts(bundle []byte, ca *x509.Certificate) bool {
	return ca != nil && slices.ContainsFunc(parseBundle(bundle), ca.Equal)
}

// encodeBundle writes CAs once each, oldest first, so that the same set
// is always the same bytes and a pass that changes nothing writes
// nothing.
func encodeBundle(cas []*x509.Certificate) []byte {
	var keep []*x509.Certificate
	for _, ca := range cas {
		if !slices.ContainsFunc(keep, ca.Equal) {
			keep = append(keep, ca)
		}
	}
	slices.SortStableFunc(keep, func(a, b *x509.Certificate) int {
		if c := a.NotBefore.Compare(b.NotBefore); c != 0 {
			return c
		}
		return slices.Compare(a.Raw, b.Raw)
	})
	out, _ := cert.EncodeCertificates(keep...)
	return out
}
