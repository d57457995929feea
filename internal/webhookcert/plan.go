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
	"bytes"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the Secret's data.
const (
	certKey     = corev1.TLSCertKey       // the served certificate, then its CA
	keyKey      = corev1.TLSPrivateKeyKey // its private key
	bundleKey   = "ca.crt"                // every CA the API server must trust
	nextCertKey = "next.crt"              // a new pair, not served yet
	nextKeyKey  = "next.key"
)

// Annotations of the Secret: the schedule every replica follows, whoever
// wrote it. Times are RFC 3339, in UTC, rounded up to the second.
const (
	// PromoteAfterAnnotation: when the next pair may be served. Set a
	// grace period after a replica first read its CA in the CRD's
	// caBundle, so every API server has built its client with that CA
	// before any replica serves a certificate signed by it.
	PromoteAfterAnnotation = "webhookcert.barcontroller.dev/promote-next-after"
	// RetireAfterAnnotation: when the CAs in ca.crt that sign neither the
	// served nor the next pair leave the bundle. Set a grace period after
	// they were superseded, so every replica has loaded the new pair (it
	// reads the Secret every sync period) before the API server stops
	// trusting the old one.
	RetireAfterAnnotation = "webhookcert.barcontroller.dev/retire-cas-after"
)

// secretState is what the keeper keeps in the Secret.
type secretState struct {
	data                      map[string][]byte
	promoteAfter, retireAfter time.Time // zero: not scheduled
}

func stateOf(s *corev1.Secret) secretState {
	parse := func(key string) time.Time {
		t, err := time.Parse(time.RFC3339, s.Annotations[key])
		if err != nil {
			// Missing, or edited by hand into nonsense: unscheduled, and
			// scheduled again by the next pass that needs it.
			return time.Time{}
		}
		return t
	}
	return secretState{data: maps.Clone(s.Data), promoteAfter: parse(PromoteAfterAnnotation), retireAfter: parse(RetireAfterAnnotation)}
}

// applyTo writes st into s, and says whether that changed s.
func (st secretState) applyTo(s *corev1.Secret) bool {
	changed := !maps.EqualFunc(st.data, s.Data, bytes.Equal)
	s.Data = st.data
	for key, t := range map[string]time.Time{PromoteAfterAnnotation: st.promoteAfter, RetireAfterAnnotation: st.retireAfter} {
		old, had := s.Annotations[key]
		switch {
		case t.IsZero() && had:
			delete(s.Annotations, key)
			changed = true
		case !t.IsZero() && old != t.UTC().Format(time.RFC3339):
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[key] = t.UTC().Format(time.RFC3339)
			changed = true
		}
	}
	return changed
}

// after is now plus d, rounded up to what the annotation can say.
func after(now time.Time, d time.Duration) time.Time {
	t := now.Add(d)
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// plan returns what the Secret should hold, and what it did to get there
// (for the log), given what it holds, the CRD's caBundle as this pass
// read it, the name the CRD calls the webhook by ("" if none), and the
// time. Nothing else: every replica that reads the same
// Secret and CRD at the same time plans the same, except for the keys of
// the pairs it makes, and a pair is made only when the Secret has none
// that serves this replica's names, so a replica whose names the Secret's
// pairs cover never writes one.
//
// The served pair is replaced without a gap (make before break): a new
// pair waits as next until its CA has been in the CRD's caBundle for the
// grace period, and the CA it supersedes stays in the bundle for another
// grace period. Only when nothing valid is served (a first start, or
// everything expired) is a new pair served at once: there is no trust to
// keep. Nor is there when the served pair is not valid for the name the
// CRD calls (the CRD was pointed elsewhere): the API server cannot call
// any replica with it, so the next pair is served as soon as the CRD
// carries its CA, without the grace period.
//
// A pair is always made for the union of this replica's names and those
// of the pairs in the Secret: replicas with different names (a rollout
// that changes --conversion-webhook-cert-names, conversion-only replicas
// with names of their own) each add theirs at most once and converge on
// one certificate for all, instead of replacing each other's.
func (k *Keeper) plan(in secretState, crdBundle []byte, called string, now time.Time) (secretState, []string, error) {
	out := secretState{data: maps.Clone(in.data), promoteAfter: in.promoteAfter, retireAfter: in.retireAfter}
	if out.data == nil {
		out.data = map[string][]byte{}
	}
	var did []string
	cur, _ := parsePair(out.data[certKey], out.data[keyKey], now)
	next, _ := parsePair(out.data[nextCertKey], out.data[nextKeyKey], now)
	if next == nil && (len(out.data[nextCertKey]) > 0 || len(out.data[nextKeyKey]) > 0) {
		did = append(did, "dropped a next pair that is not valid")
		setNext(&out, nil)
	}
	newPair := func(names []string) (*pair, error) {
		certPEM, keyPEM, err := generate(names, k.Validity)
		if err != nil {
			return nil, err
		}
		return parsePair(certPEM, keyPEM, now)
	}

	if cur == nil {
		if next == nil {
			p, err := newPair(union(k.Names, namesOf(leafOf(out.data[certKey]))))
			if err != nil {
				return secretState{}, nil, err
			}
			did = append(did, fmt.Sprintf("made a pair for %v and served it at once: nothing valid was served", namesOf(p.leaf)))
			next = p
		} else {
			did = append(did, "served the next pair at once: nothing valid was served")
		}
		setServed(&out, next)
		setNext(&out, nil)
		cur, next = next, nil
	}

	// A CA that was next and is replaced was never served, so nothing
	// needs it: it leaves the bundle at once.
	var unserved *x509.Certificate
	switch {
	case next != nil && !covers(next.leaf, k.Names):
		p, err := newPair(union(k.Names, namesOf(cur.leaf), namesOf(next.leaf)))
		if err != nil {
			return secretState{}, nil, err
		}
		unserved = next.ca
		setNext(&out, p)
		next = p
		did = append(did, fmt.Sprintf("replaced the next pair with one for %v: it was not valid for %v", namesOf(p.leaf), k.Names))
	case next == nil && !covers(cur.leaf, k.Names):
		p, err := newPair(union(k.Names, namesOf(cur.leaf)))
		if err != nil {
			return secretState{}, nil, err
		}
		setNext(&out, p)
		next = p
		did = append(did, fmt.Sprintf("made a next pair for %v: the served one is not valid for %v", namesOf(p.leaf), k.Names))
	case next == nil && !now.Before(cur.leaf.NotAfter.Add(-k.RotateBefore)):
		p, err := newPair(union(k.Names, namesOf(cur.leaf)))
		if err != nil {
			return secretState{}, nil, err
		}
		setNext(&out, p)
		next = p
		did = append(did, fmt.Sprintf("made a next pair: the served one expires at %v", cur.leaf.NotAfter.UTC().Format(time.RFC3339)))
	}

	superseded := []*x509.Certificate{}
	uncallable := called != "" && !covers(cur.leaf, []string{called})
	switch {
	case next == nil:
	case !trusts(crdBundle, next.ca):
		// Wait for the CRD: the grace period counts from there. A time
		// already recorded stays: this pass read the CRD before the
		// Secret, and may have read it before the write that another
		// replica's pass then found (no replica of this Secret takes a CA
		// out of the bundle while it is next, and keepers of other
		// Secrets refuse). Promotion still needs the CA in the CRD.
	case out.promoteAfter.IsZero() && !uncallable:
		out.promoteAfter = after(now, k.grace())
		did = append(did, fmt.Sprintf("read the next CA in the CRD's caBundle: serving the next pair after %v", out.promoteAfter.UTC().Format(time.RFC3339)))
	case uncallable || !now.Before(out.promoteAfter):
		superseded = append(superseded, cur.ca)
		setServed(&out, next)
		setNext(&out, nil)
		cur, next = next, nil
		// Every CA superseded before leaves with this one, not earlier.
		if t := after(now, k.grace()); t.After(out.retireAfter) {
			out.retireAfter = t
		}
		did = append(did, "served the next pair, trusted for the grace period")
	}

	// The bundle: the served and next CAs, and the others until they are
	// retired. Expired ones go at once: nothing can be served under them.
	keep := []*x509.Certificate{cur.ca}
	if next != nil {
		keep = append(keep, next.ca)
	}
	var retiring []*x509.Certificate
	for _, ca := range append(parseBundle(out.data[bundleKey]), superseded...) {
		switch {
		case !now.Before(ca.NotAfter), slices.ContainsFunc(keep, ca.Equal), unserved != nil && ca.Equal(unserved):
		case !slices.ContainsFunc(retiring, ca.Equal):
			retiring = append(retiring, ca)
		}
	}
	switch {
	case len(retiring) == 0:
		out.retireAfter = time.Time{}
	case out.retireAfter.IsZero():
		out.retireAfter = after(now, k.grace())
	case !now.Before(out.retireAfter):
		did = append(did, fmt.Sprintf("dropped %d superseded CA(s) from the bundle", len(retiring)))
		retiring = nil
		out.retireAfter = time.Time{}
	}
	out.data[bundleKey] = encodeBundle(append(keep, retiring...))
	if next == nil {
		out.promoteAfter = time.Time{}
	}
	return out, did, nil
}

func setServed(st *secretState, p *pair) {
	st.data[certKey], st.data[keyKey] = p.certPEM, p.keyPEM
}

// setNext sets or (nil) removes the next pair; a new next pair waits for
// the CRD again.
func setNext(st *secretState, p *pair) {
	st.promoteAfter = time.Time{}
	if p == nil {
		delete(st.data, nextCertKey)
		delete(st.data, nextKeyKey)
		return
	}
	st.data[nextCertKey], st.data[nextKeyKey] = p.certPEM, p.keyPEM
}
