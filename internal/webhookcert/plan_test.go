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
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// What plan makes of every state the Secret and the CRD can be in: which
// pair is served and which waits as next ("p1", "p2", ... the pairs the
// test made; "new" one plan made, valid for exactly newNames), which CAs
// the bundle holds, in order, when the schedule says to promote and to
// retire ("" none, "grace" now plus the grace period, "kept" as it was),
// and whether the Secret changes at all. Bundles are listed sorted.
func TestPlan(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	const grace = 5 * time.Minute
	mine := []string{dnsNames[0], "extra.bar-controller.svc"}
	other := []string{dnsNames[0], "other.bar-controller.svc"}
	mk := func(names []string, validity time.Duration) *pair {
		t.Helper()
		certPEM, keyPEM, err := generate(names, validity)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parsePair(certPEM, keyPEM, now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// util/cert makes certificates valid from an hour ago: these expire an
	// hour from now.
	p1, p2, p3 := mk(dnsNames, DefaultValidity), mk(dnsNames, DefaultValidity), mk(dnsNames, DefaultValidity)
	pOther, short, shortOther := mk(other, DefaultValidity), mk(dnsNames, 2*time.Hour), mk(other, 2*time.Hour)
	labels := map[string]*pair{"p1": p1, "p2": p2, "p3": p3, "pOther": pOther, "short": short, "shortOther": shortOther}
	in := func(served, next string, bundle ...string) secretState {
		st := secretState{data: map[string][]byte{}}
		if p := labels[served]; p != nil {
			st.data[certKey], st.data[keyKey] = p.certPEM, p.keyPEM
		}
		if p := labels[next]; p != nil {
			st.data[nextCertKey], st.data[nextKeyKey] = p.certPEM, p.keyPEM
		}
		var cas []*x509.Certificate
		for _, l := range bundle {
			cas = append(cas, labels[l].ca)
		}
		if len(cas) > 0 {
			st.data[bundleKey] = encodeBundle(cas)
		}
		return st
	}
	bundleOf := func(ls ...string) []byte {
		var cas []*x509.Certificate
		for _, l := range ls {
			cas = append(cas, labels[l].ca)
		}
		return encodeBundle(cas)
	}
	at := func(st secretState, promote, retire time.Time) secretState {
		st.promoteAfter, st.retireAfter = promote, retire
		return st
	}
	broken := func(st secretState, key string, v []byte) secretState {
		st.data[key] = v
		return st
	}

	for _, tc := range []struct {
		name            string
		in              secretState
		crd             []byte
		names           []string
		called          string        // the name the CRD calls the webhook by ("": none)
		later           time.Duration // now, plus this
		served, next    string
		newNames        []string
		bundle          []string
		promote, retire string
		unchanged       bool
	}{
		{name: "empty: a pair served at once", in: in("", ""), served: "new", newNames: dnsNames, bundle: []string{"new"}},
		{name: "served, nothing due", in: in("p1", "", "p1"), crd: bundleOf("p1"), served: "p1", bundle: []string{"p1"}, unchanged: true},
		{name: "served lacks my names: next for the union", in: in("p1", "", "p1"), crd: bundleOf("p1"), names: mine,
			served: "p1", next: "new", newNames: []string{mine[0], mine[1], dnsNames[1]}, bundle: []string{"new", "p1"}},
		{name: "next not in the CRD yet", in: in("p1", "p2", "p1", "p2"), crd: bundleOf("p1"),
			served: "p1", next: "p2", bundle: []string{"p1", "p2"}, unchanged: true},
		{name: "next read in the CRD: scheduled", in: in("p1", "p2", "p1", "p2"), crd: bundleOf("p1", "p2"),
			served: "p1", next: "p2", bundle: []string{"p1", "p2"}, promote: "grace"},
		{name: "next scheduled, a second early", in: at(in("p1", "p2", "p1", "p2"), now.Add(time.Second), time.Time{}), crd: bundleOf("p1", "p2"),
			served: "p1", next: "p2", bundle: []string{"p1", "p2"}, promote: "kept", unchanged: true},
		{name: "next scheduled, on time: promoted", in: at(in("p1", "p2", "p1", "p2"), now, time.Time{}), crd: bundleOf("p1", "p2"),
			served: "p2", bundle: []string{"p1", "p2"}, retire: "grace"},
		{name: "served not valid for the name the CRD calls: next served once the CRD carries its CA", in: in("p1", "pOther", "p1", "pOther"),
			crd: bundleOf("p1", "pOther"), names: other, called: other[1], served: "pOther", bundle: []string{"p1", "pOther"}, retire: "grace"},
		{name: "served not valid for the name the CRD calls, next not in the CRD yet: waits", in: in("p1", "pOther", "p1", "pOther"),
			crd: bundleOf("p1"), names: other, called: other[1], served: "p1", next: "pOther", bundle: []string{"p1", "pOther"}, unchanged: true},
		{name: "next scheduled, on time, not in this read of the CRD: waits", in: at(in("p1", "p2", "p1", "p2"), now, time.Time{}), crd: bundleOf("p1"),
			served: "p1", next: "p2", bundle: []string{"p1", "p2"}, promote: "kept", unchanged: true},
		{name: "superseded, a second early", in: at(in("p2", "", "p1", "p2"), time.Time{}, now.Add(time.Second)), crd: bundleOf("p1", "p2"),
			served: "p2", bundle: []string{"p1", "p2"}, retire: "kept", unchanged: true},
		{name: "superseded, on time: retired", in: at(in("p2", "", "p1", "p2"), time.Time{}, now), crd: bundleOf("p1", "p2"),
			served: "p2", bundle: []string{"p2"}},
		{name: "superseded with no time (an old keeper's bundle): scheduled", in: in("p3", "", "p1", "p2", "p3"), crd: bundleOf("p1", "p2", "p3"),
			served: "p3", bundle: []string{"p1", "p2", "p3"}, retire: "grace"},
		{name: "an expired CA leaves at once", in: in("p1", "", "short", "p1"), crd: bundleOf("short", "p1"), later: 2 * time.Hour,
			served: "p1", bundle: []string{"p1"}},
		{name: "next lacks my names: replaced for all, its CA dropped at once", in: in("p1", "pOther", "p1", "pOther"),
			crd: bundleOf("p1", "pOther"), names: mine,
			served: "p1", next: "new", newNames: []string{mine[0], mine[1], dnsNames[1], other[1]}, bundle: []string{"new", "p1"}},
		{name: "served expired, next valid: next served at once", in: in("short", "p2", "short", "p2"), crd: bundleOf("short", "p2"), later: 2 * time.Hour,
			served: "p2", bundle: []string{"p2"}},
		{name: "served expired, no next: a pair for its names and mine at once", in: in("shortOther", "", "shortOther"), later: 2 * time.Hour,
			served: "new", newNames: []string{dnsNames[0], dnsNames[1], other[1]}, bundle: []string{"new"}},
		{name: "next not a pair: dropped", in: broken(in("p1", "p2", "p1"), nextKeyKey, p1.keyPEM), crd: bundleOf("p1"),
			served: "p1", bundle: []string{"p1"}},
		{name: "served key does not match: a pair at once, the old CA retiring", in: broken(in("p1", "", "p1"), keyKey, p2.keyPEM), crd: bundleOf("p1"),
			served: "new", newNames: dnsNames, bundle: []string{"new", "p1"}, retire: "grace"},
		{name: "rotation due: next for the same names", in: in("p1", "", "p1"), crd: bundleOf("p1"), later: DefaultValidity - DefaultRotateBefore,
			served: "p1", next: "new", newNames: dnsNames, bundle: []string{"new", "p1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Keeper{Names: dnsNames, Validity: DefaultValidity, RotateBefore: DefaultRotateBefore, Grace: grace}
			if tc.names != nil {
				k.Names = tc.names
			}
			when := now.Add(tc.later)
			out, did, err := k.plan(tc.in, tc.crd, tc.called, when)
			if err != nil {
				t.Fatal(err)
			}
			label := func(certPEM []byte) string {
				if len(certPEM) == 0 {
					return ""
				}
				for l, p := range labels {
					if bytes.Equal(p.certPEM, certPEM) {
						return l
					}
				}
				if got := namesOf(leafOf(certPEM)); fmt.Sprint(got) != fmt.Sprint(tc.newNames) {
					t.Errorf("a new pair for %v, want %v", got, tc.newNames)
				}
				return "new"
			}
			if got := label(out.data[certKey]); got != tc.served {
				t.Errorf("served %s, want %s", got, tc.served)
			}
			if got := label(out.data[nextCertKey]); got != tc.next {
				t.Errorf("next %s, want %s", got, tc.next)
			}
			var bundle []string
			for _, ca := range parseBundle(out.data[bundleKey]) {
				l := "new"
				for name, p := range labels {
					if p.ca.Equal(ca) {
						l = name
					}
				}
				bundle = append(bundle, l)
			}
			// Sorted: pairs made in one second are ordered by their bytes.
			slices.Sort(bundle)
			if fmt.Sprint(bundle) != fmt.Sprint(tc.bundle) {
				t.Errorf("bundle %v, want %v", bundle, tc.bundle)
			}
			schedule := func(what string, got, was time.Time, want string) {
				var w time.Time
				switch want {
				case "grace":
					w = when.Add(grace)
				case "kept":
					w = was
				}
				if !got.Equal(w) {
					t.Errorf("%s at %v, want %v (%q)", what, got, w, want)
				}
			}
			schedule("promote", out.promoteAfter, tc.in.promoteAfter, tc.promote)
			schedule("retire", out.retireAfter, tc.in.retireAfter, tc.retire)
			s := &corev1.Secret{Data: tc.in.data}
			secretState{promoteAfter: tc.in.promoteAfter, retireAfter: tc.in.retireAfter, data: tc.in.data}.applyTo(s)
			if changed := out.applyTo(s); changed == tc.unchanged {
				t.Errorf("the Secret changed: %v, want %v (did %s)", changed, !tc.unchanged, strings.Join(did, "; "))
			}
		})
	}
}
