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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
// validity.
func generate(names []string, validity time.Duration) ([]byte, []byte, error) {
	if len(names) == 0 {
		return nil, nil, errors.New("no names for the webhook's certificate")
	}
	// The first name is the Host (util/cert puts it in the IP or DNS SANs,
	// as it parses), the others go where they belong by the same rule.
	opts := cert.SelfSignedCertKeyOptions{Host: names[0], MaxAge: validity}
	for _, name := range names[1:] {
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
// the serving certificate.
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
