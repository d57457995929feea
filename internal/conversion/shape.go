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

package conversion

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
)

// The budget counts bodies, on the assumption that converting a review
// costs a few times its body (limit.go). Decoding into the Go types does
// not cost by the byte but by the value: "{}," is three bytes, and as an
// element of status.conditions it becomes a metav1.Condition, a slice's
// growth, and in the answer a condition with its empty fields written
// out. A 4 MiB Bar of such conditions took 465 MiB of heap and answered
// 100 MB; of ownerReferences or managedFields, the same (issue 39, ninth
// review, C1). Nothing the API server stores is like that (each of those
// entries has required fields), but the webhook's callers need not be
// the API server.
//
// So before it is decoded, each object is weighed: its bytes are read
// once (scan) and its weight is the larger of its bytes and what its
// values cost at their cheapest: containerWeight an object or array,
// elementWeight more an array's element, scalarWeight a key or any other
// value, quantityWeight a quantity. The
// request's part of the budget grows to the weight of
// its objects before any is decoded, or the request is refused. A Bar the
// API server sends weighs its bytes (TestBarsWeighTheirBytes): the
// budget's measure of it is unchanged. And a value of a few bytes costs
// what it allocates (TestWeightBoundsTheCost).
const (
	// containerWeight: an object or an array costs a struct, a map or a
	// slice (with its growth), and in the answer its fields written out:
	// "{}" as a condition allocated about 1.2 KB in all, as an
	// ownerReference or a managedFields entry about 0.8 KB, as much as
	// 30 to 60 bytes of a Bar the API server sends
	// (TestWeightBoundsTheCost).
	containerWeight = 32
	// elementWeight: an array's element, whatever it is, also costs a
	// slice element of the array's type, and comes back as that type's
	// zero value written out: a null in status.conditions, five bytes
	// weighed as a scalar, decoded to a metav1.Condition and was written
	// back as 72 bytes ("{\"type\":\"\",...}"): 516,969 of them, 2.5 MiB
	// admitted alone, held 150 MiB live (issue 39, thirteenth review, C1).
	elementWeight = 32
	// scalarWeight: any other value, and any key, is at least a string's
	// or a number's header, a map entry's, or a slice element.
	scalarWeight = 8
	// quantityWeight: a quantity is parsed and written again in
	// canonical form, about 750 bytes allocated for `"a":"1"` in limits.
	quantityWeight = 40
)

// shape is what weighing an object found.
type shape struct {
	// bytes are the object's, and those of the nested strings once more.
	bytes, containers int
	// elements are the arrays' elements, counted again as elements.
	elements int
	// values are the keys and the values other than objects and arrays.
	values, quantities int
	// unbounded is the path of the first quantity that
	// barcontroller.BoundedQuantity refuses, if any.
	unbounded string
}

// weight is the object's measure for the budget (see containerWeight).
func (s shape) weight() int64 {
	// A quantity is one of the values too.
	values := containerWeight*int64(s.containers) + elementWeight*int64(s.elements) + scalarWeight*int64(s.values) + (quantityWeight-scalarWeight)*int64(s.quantities)
	return max(int64(s.bytes), values)
}

// shapeOf weighs one object. It refuses a quantity longer than the CRD
// allows, before anything parses it (barcontroller.MaxQuantityBytes).
func shapeOf(raw []byte) (shape, error) {
	// The paths above are a Bar's. The decoder takes any kind registered
	// in the group (a BarList's items would be weighed as anything), and
	// reads the kind as this does; the API server sends Bars only.
	gvk, err := kjson.DefaultMetaFactory.Interpret(raw)
	if err != nil {
		return shape{}, err
	}
	// And only in the versions served: the decoder also takes the
	// internal one ("__internal"), whose fields have no JSON names, so
	// none of the paths above would be found in it (eleventh review, C1
	// and C2).
	if gvk.Group != barcontroller.GroupName || gvk.Kind != "Bar" || !servedVersions[gvk.Version] {
		return shape{}, fmt.Errorf("%s is not a Bar of the %s API", clip(gvk.String()), barcontroller.GroupName)
	}
	s, err := scan(raw, make([]string, 0, 8), true)
	if err != nil {
		return shape{}, err
	}
	if s.unbounded != "" {
		return shape{}, fmt.Errorf("%s is a quantity the Bar CRD refuses: longer than %d bytes, an exponent of more than two digits, or an escape", s.unbounded, barcontroller.MaxQuantityBytes)
	}
	return s, nil
}

// scan counts the values of the JSON value raw, found at root. It reads
// the bytes once and allocates next to nothing: encoding/json's
// Decoder.Token, which decodes every value it returns, took as long as
// the conversion itself and allocated 15 times the bytes it read. What
// scan accepts that is not JSON, the decoder after it refuses.
//
// wire says raw is as it came on the wire, where the API server writes
// only valid UTF-8, U+2028 and U+2029 escaped, and no time or number of
// more than maxScalarBytes: what is not so is refused. The JSON inside
// ResourcesAnnotation is a string's contents, not the wire: those escapes
// are undone in it (twelfth review, C3: a "\u2028" in it made the scan of
// its contents fail, and them weigh nothing).
func scan(raw []byte, root []string, wire bool) (shape, error) {
	sc := scanner{data: raw, s: shape{bytes: len(raw)}, path: root, wire: wire}
	if err := sc.value(); err != nil {
		return shape{}, err
	}
	if sc.space(); sc.i != len(sc.data) {
		return shape{}, fmt.Errorf("not JSON: more after the value at offset %d", sc.i)
	}
	return sc.s, nil
}

// maxDepth is as deep as encoding/json nests.
const maxDepth = 10000

type scanner struct {
	data []byte
	i    int
	s    shape
	// path is where the value being read is: its keys from the object's
	// root ("*" for an array's element; only the first few are kept,
	// the deeper ones as "", for they matter to nothing here). One
	// slice, pushed and popped.
	path []string
	wire bool
}

var errNotJSON = errors.New("not JSON")

// maxScalarBytes bounds a number, and a time (metav1.Time), on the wire:
// an int64 has at most 20 characters, a quantity (a number, too, in
// JSON) at most barcontroller.MaxQuantityBytes, a time in RFC 3339 about
// 35. Decoding a longer one fails with an error that quotes it, escaped:
// a time of 4 MiB of "é" made messages of 16 and 32 MiB before any was
// clipped (twelfth review, C2).
const maxScalarBytes = 64

func (sc *scanner) space() {
	for sc.i < len(sc.data) {
		switch sc.data[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// value reads the value at sc.path and counts it and what it holds.
func (sc *scanner) value() error {
	if len(sc.path) > maxDepth {
		return fmt.Errorf("not JSON: nested more than %d deep", maxDepth)
	}
	sc.space()
	if sc.i == len(sc.data) {
		return errNotJSON
	}
	switch sc.data[sc.i] {
	case '{':
		sc.s.containers++
		return sc.members('}', func() error {
			key, err := sc.str()
			if err != nil {
				return err
			}
			// In a map, a key is an entry's string: counted as a value.
			sc.s.values++
			if nested(sc.path) {
				sc.s.bytes += len(key)
			}
			if sc.space(); sc.i == len(sc.data) || sc.data[sc.i] != ':' {
				return errNotJSON
			}
			sc.i++
			sc.path = append(sc.path, sc.name(key))
			if opaque(sc.path) {
				// The Go types keep it as raw bytes: it costs its bytes.
				err = sc.skip()
			} else {
				err = sc.value()
			}
			sc.path = sc.path[:len(sc.path)-1]
			return err
		})
	case '[':
		sc.s.containers++
		return sc.members(']', func() error {
			sc.s.elements++
			sc.path = append(sc.path, "*")
			err := sc.value()
			sc.path = sc.path[:len(sc.path)-1]
			return err
		})
	case '"':
		v, err := sc.str()
		if err != nil {
			return err
		}
		if isResourcesAnnotation(sc.path) {
			if err := sc.annotation(v); err != nil {
				return err
			}
		}
		if nested(sc.path) {
			sc.s.bytes += len(v)
		}
		if sc.wire && len(v)-2 > maxScalarBytes && isTime(sc.path) {
			return fmt.Errorf("%s is a time of %d bytes", strings.Join(sc.path, "."), len(v)-2)
		}
		sc.scalar(v[1 : len(v)-1])
		return nil
	default:
		start := sc.i
		for sc.i < len(sc.data) && !bytes.ContainsRune([]byte(",:]} \t\n\r"), rune(sc.data[sc.i])) {
			sc.i++
		}
		if sc.i == start {
			return errNotJSON
		}
		if sc.wire && sc.i-start > maxScalarBytes {
			return fmt.Errorf("a number of %d bytes at offset %d", sc.i-start, start)
		}
		sc.scalar(sc.data[start:sc.i])
		return nil
	}
}

// members reads an object's or an array's members with member, up to end.
func (sc *scanner) members(end byte, member func() error) error {
	sc.i++ // the opening { or [
	if sc.space(); sc.i < len(sc.data) && sc.data[sc.i] == end {
		sc.i++
		return nil
	}
	for {
		if err := member(); err != nil {
			return err
		}
		sc.space()
		if sc.i == len(sc.data) {
			return errNotJSON
		}
		switch sc.data[sc.i] {
		case ',':
			sc.i++
		case end:
			sc.i++
			return nil
		default:
			return errNotJSON
		}
	}
}

// str reads a string, and returns it as it is in the JSON, quotes and
// escapes included.
func (sc *scanner) str() ([]byte, error) {
	sc.space()
	if sc.i == len(sc.data) || sc.data[sc.i] != '"' {
		return nil, errNotJSON
	}
	start := sc.i
	for sc.i++; sc.i < len(sc.data); sc.i++ {
		switch sc.data[sc.i] {
		case '\\':
			sc.i++
		case '"':
			sc.i++
			// The API server stores valid UTF-8 only (its decoder writes
			// U+FFFD for what is not), and each invalid byte would come
			// back as those three bytes: an answer three times its review.
			if !sc.wire {
				return sc.data[start:sc.i], nil
			}
			if !utf8.Valid(sc.data[start:sc.i]) {
				return nil, fmt.Errorf("a string at offset %d is not valid UTF-8", start)
			}
			// Nor U+2028 or U+2029 as they are: encoding/json writes them
			// escaped, six bytes for three, and so does the API server
			// (eleventh review, M1).
			if s := sc.data[start:sc.i]; bytes.Contains(s, lineSeparator) || bytes.Contains(s, paragraphSeparator) {
				return nil, fmt.Errorf("a string at offset %d holds U+2028 or U+2029 unescaped", start)
			}
			return sc.data[start:sc.i], nil
		}
	}
	return nil, errNotJSON
}

// skip reads a value without counting what it holds.
func (sc *scanner) skip() error {
	inner := scanner{data: sc.data, i: sc.i, path: sc.path[len(sc.path):], wire: sc.wire}
	err := inner.value()
	sc.i = inner.i
	return err
}

var lineSeparator, paragraphSeparator = []byte("\u2028"), []byte("\u2029")

// name is key (a string as in the JSON) as a path element: the keys the
// paths above look for, and a resource's name under limits or requests;
// "" for any other, which matters to nothing here (and costs nothing).
func (sc *scanner) name(key []byte) string {
	if len(sc.path) >= 5 {
		return ""
	}
	inner := key[1 : len(key)-1]
	// Unescaped only where it could spell one of pathKeys (six bytes
	// for a character at most): an escape in every key of a large map
	// made the scan allocate 15 times its input (eleventh review, m1).
	if bytes.IndexByte(inner, '\\') >= 0 && len(inner) <= 6*maxPathKey {
		var s string
		if json.Unmarshal(key, &s) != nil {
			return ""
		}
		inner = []byte(s)
	}
	for _, k := range pathKeys {
		if string(inner) == k {
			return k
		}
	}
	if n := len(sc.path); n > 0 && (sc.path[n-1] == "limits" || sc.path[n-1] == "requests") {
		return string(inner)
	}
	return ""
}

// annotation counts the values of ResourcesAnnotation's JSON, which
// converting from v1alpha1 decodes as resources: its values cost as the
// object's do. What is not JSON stays an annotation, and costs its bytes.
func (sc *scanner) annotation(quoted []byte) error {
	var v string
	if json.Unmarshal(quoted, &v) != nil {
		return errNotJSON
	}
	inner, err := scan([]byte(v), []string{annotationRoot}, false)
	if err != nil {
		return nil // not JSON: the strict decoding fails too, and it stays an annotation
	}
	sc.s.containers += inner.containers
	sc.s.elements += inner.elements
	sc.s.values += inner.values
	sc.s.quantities += inner.quantities
	return nil
}

// scalar counts a value that is neither an object nor an array: raw, a
// string's bytes between its quotes or another value's.
func (sc *scanner) scalar(raw []byte) {
	sc.s.values++
	if !isQuantity(sc.path) {
		return
	}
	sc.s.quantities++
	if sc.s.unbounded == "" && !barcontroller.BoundedQuantity(string(raw)) {
		sc.s.unbounded = strings.Join(sc.path, ".")
	}
}

// weigh is the weight of a review's objects, or why one of them cannot be
// converted, said as Convert says it.
func weigh(objects []runtime.RawExtension) (int64, error) {
	var total int64
	for i, o := range objects {
		s, err := shapeOf(o.Raw)
		if err != nil {
			return 0, fmt.Errorf("object %d of %d: %w", i+1, len(objects), err)
		}
		total += s.weight()
	}
	return total, nil
}
