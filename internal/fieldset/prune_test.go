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

package fieldset

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

func named(n string) fieldpath.PathElement { return fieldpath.PathElement{FieldName: &n} }

func keyed(name string) fieldpath.PathElement {
	return fieldpath.PathElement{Key: &value.FieldList{{Name: "name", Value: value.NewValueInterface(name)}}}
}

// prefixes is a drift check's kind of prefixes: named fields, one keyed
// list entry, and one place where any key will do (nil).
var prefixes = [][]*fieldpath.PathElement{
	{ptr(named("metadata")), ptr(named("labels")), ptr(named("app.kubernetes.io/managed-by"))},
	{ptr(named("metadata")), ptr(named("ownerReferences")), nil},
	{ptr(named("spec")), ptr(named("replicas"))},
	{ptr(named("spec")), ptr(named("template")), ptr(named("spec")), ptr(named("containers")), ptr(keyed("app")), ptr(named("image"))},
}

func ptr[T any](v T) *T { return &v }

func serialized(t testing.TB) [][]string {
	t.Helper()
	var out [][]string
	for _, p := range prefixes {
		var s []string
		for _, pe := range p {
			if pe == nil {
				s = append(s, Any)
				continue
			}
			k, err := fieldpath.SerializePathElement(*pe)
			if err != nil {
				t.Fatal(err)
			}
			s = append(s, k)
		}
		out = append(out, s)
	}
	return out
}

// bySet is the oracle: the fieldpath.Set parse, filter and write-back
// Prune replaces.
func bySet(t testing.TB, raw []byte) *fieldpath.Set {
	t.Helper()
	all := &fieldpath.Set{}
	if err := all.FromJSON(bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	kept := &fieldpath.Set{}
	all.Iterate(func(p fieldpath.Path) {
		for _, prefix := range prefixes {
			if len(p) < len(prefix) {
				continue
			}
			match := true
			for i, pe := range prefix {
				if pe != nil && !p[i].Equals(*pe) {
					match = false
					break
				}
			}
			if match {
				kept.Insert(p.Copy())
				return
			}
		}
	})
	return kept
}

// elements are what random paths are made of: the prefixes' own and
// others at every place.
var elements = []fieldpath.PathElement{
	named("metadata"), named("labels"), named("app.kubernetes.io/managed-by"), named("other"),
	named("ownerReferences"), named("spec"), named("replicas"), named("template"), named("containers"),
	named("image"), named("resources"), keyed("app"), keyed("sidecar"), keyed(`we"ird\`),
	{Key: &value.FieldList{{Name: "uid", Value: value.NewValueInterface("0123")}}},
	{Value: ptr(value.NewValueInterface("v"))}, {Index: ptr(3)},
}

// TestPruneAgreesWithSet: on random sets, and on sets made to follow the
// prefixes, Prune keeps the members the fieldpath.Set way keeps, and
// pruning its output again changes nothing (the transform runs twice
// under WatchList).
func TestPruneAgreesWithSet(t *testing.T) {
	pre := serialized(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		set := &fieldpath.Set{}
		for range 1 + r.IntN(30) {
			var p fieldpath.Path
			follow := prefixes[r.IntN(len(prefixes))]
			for d := range 1 + r.IntN(7) {
				switch {
				case d < len(follow) && follow[d] != nil && r.IntN(4) > 0:
					p = append(p, *follow[d])
				default:
					p = append(p, elements[r.IntN(len(elements))])
				}
			}
			set.Insert(p)
		}
		raw, err := set.ToJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := Prune(raw, pre)
		if !ok {
			t.Fatalf("case %d: Prune refused %s", i, raw)
		}
		parsed := &fieldpath.Set{}
		if err := parsed.FromJSON(bytes.NewReader(got)); err != nil {
			t.Fatalf("case %d: Prune wrote %s: %v", i, got, err)
		}
		if want := bySet(t, raw); !parsed.Equals(want) {
			t.Fatalf("case %d: from %s\nPrune kept %s\nthe Set way %s", i, raw, parsed, want)
		}
		again, ok := Prune(got, pre)
		if !ok || !bytes.Equal(again, got) {
			t.Fatalf("case %d: pruning %s again gave %s", i, got, again)
		}
	}
}

// TestPruneRefusesWhatIsNotAnObject: malformed entries are refused, never
// read past their end.
func TestPruneRefusesWhatIsNotAnObject(t *testing.T) {
	pre := serialized(t)
	for _, raw := range []string{``, `[]`, `"x"`, `{`, `{"f:spec":`, `{"f:spec":{}`, `{"f:spec":[}`, `{"f:spec":{}}}`,
		`{"f:spec" {}}`, `{"f:spec":{},}`, `{"f:metadata":{"f:ownerReferences":{"k:{\"uid\":1}":{"a":tru`, `{"f:spec":"x"}`,
		`{"f:metadata":{"f:ownerReferences":{"k":{` + strings.Repeat("[", 100000)} {
		if out, ok := Prune([]byte(raw), pre); ok {
			t.Errorf("Prune(%q) = %q, want a refusal", raw, out)
		}
	}
}

// forged is an entry of n bytes of owner-reference keys, which a prefix
// keeps whole: the most a writer can make Prune copy.
func forged(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:ownerReferences":{`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k:{\"uid\":\"%036d\"}":{}`, i)
	}
	b.WriteString(`}},"f:spec":{"f:template":{"f:spec":{"f:containers":{`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k:{\"name\":\"c%d\"}":{"f:image":{}}`, i)
	}
	b.WriteString(`}}}}}`)
	return []byte(b.String())
}

// TestPruneCostIsOnePass: what a 32 KiB entry costs, by allocations, a
// count that does not depend on the machine: the output's buffer and the
// few that name the keys it must read (the containers' escaped ones), not
// one or more for each of its members as a parse into a fieldpath.Set
// makes (thousands).
func TestPruneCostIsOnePass(t *testing.T) {
	pre := serialized(t)
	raw := forged(32 << 10)
	allocs := testing.AllocsPerRun(20, func() {
		if _, ok := Prune(raw, pre); !ok {
			t.Fatal("refused")
		}
	})
	setAllocs := testing.AllocsPerRun(3, func() { bySet(t, raw) })
	t.Logf("%d bytes: Prune %.0f allocations, the Set way %.0f", len(raw), allocs, setAllocs)
	if allocs > 350 || allocs*10 > setAllocs {
		t.Errorf("Prune made %.0f allocations for %d bytes (the Set way %.0f); want one pass, at most 350", allocs, len(raw), setAllocs)
	}
}

func BenchmarkPrune32KiB(b *testing.B) {
	pre := serialized(b)
	raw := forged(32 << 10)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		Prune(raw, pre)
	}
}

func BenchmarkSet32KiB(b *testing.B) {
	raw := forged(32 << 10)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		bySet(b, raw)
	}
}

// TestPruneReadsEscapes: a key is matched by the string it holds, however
// it is escaped, as the Set way reads it.
func TestPruneReadsEscapes(t *testing.T) {
	pre := serialized(t)
	for _, raw := range []string{
		`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"\u0061pp\"}":{"f:image":{}}}}}}}`,
		`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{"f:image":{},".":{}}}}}}}`,
		`{"f:metadata":{"f:labels":{"f:app.kubernetes.io\/managed-by":{}}},"f:spec":{"f:replicas":{}}}`,
		`{"f:metadata":{"f:labels":{"f:\ud83d\ude00":{},".":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"1\"}":{".":{},"f:kind":{}}}}}`,
	} {
		got, ok := Prune([]byte(raw), pre)
		if !ok {
			t.Fatalf("Prune refused %s", raw)
		}
		parsed := &fieldpath.Set{}
		if err := parsed.FromJSON(bytes.NewReader(got)); err != nil {
			t.Fatalf("Prune wrote %s: %v", got, err)
		}
		if want := bySet(t, []byte(raw)); !parsed.Equals(want) || parsed.Empty() {
			t.Errorf("from %s\nPrune kept %s\nthe Set way %s", raw, parsed, want)
		}
	}
}
