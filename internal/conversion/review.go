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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// The budget bounds bodies, and a review's memory must stay a few times
// its body whatever its caller wrote in it (limit.go). Decoded as it
// came, a body is not: apiextensions' ConversionRequest holds its objects
// as a []runtime.RawExtension, 40 bytes an element and a copy of each, so
// a 4 MB review of "0," elements took 169 MiB of heap to decode (the
// slice's growth too), one such POST killed the conversion-only Pod
// (128Mi), and the budget, held only while the request lasted, never saw
// it (issue 39, eighth review, C1). And encoding/json escapes <, > and &
// as six bytes each, in the converted objects and again in the answer
// around them: a Bar whose annotation held 4 MB of '<' had an answer of
// 25 MB (C2).
//
// So a review is read with its objects as one raw list, and each element
// is checked before it gets an element of its own: an object, of at
// least minObjectBytes, at most maxObjects of them. And answers are
// written without the escaping, which a JSON reader does not need.
const (
	// minObjectBytes: the smallest object that could be a Bar, its
	// apiVersion and kind alone; the API server's have metadata besides,
	// hundreds of bytes.
	minObjectBytes = len(`{"apiVersion":"barcontroller.dev/v1","kind":"Bar"}`)
	// maxObjects: as many of the smallest as the largest review holds.
	maxObjects = maxRequestBytes / minObjectBytes
)

// reviewOnTheWire is a ConversionReview as it arrives, its objects left
// as one raw list.
type reviewOnTheWire struct {
	APIVersion json.RawMessage `json:"apiVersion"`
	Kind       json.RawMessage `json:"kind"`
	Request    *struct {
		UID               json.RawMessage `json:"uid"`
		DesiredAPIVersion json.RawMessage `json:"desiredAPIVersion"`
		Objects           json.RawMessage `json:"objects"`
	} `json:"request"`
}

// The answer echoes a review's apiVersion, kind and uid. The API server
// sends these two and a uid of 36 bytes; they are taken as they are,
// compared raw before anything decodes them: a uid of 4 MiB of invalid
// UTF-8, decoded, made an answer of 12 MiB (issue 39, twelfth review,
// M1).
const (
	reviewAPIVersion = `"apiextensions.k8s.io/v1"`
	reviewKind       = `"ConversionReview"`
	// maxUIDBytes: a UID, quoted, with room to spare; maxVersionBytes
	// the same for a group and version.
	maxUIDBytes, maxVersionBytes = 128, 512
)

// decodeReview reads a ConversionReview, refusing one whose objects are
// not objects of minObjectBytes or more, or are more than maxObjects.
func decodeReview(body []byte) (*apiextensionsv1.ConversionReview, error) {
	var in reviewOnTheWire
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if string(in.APIVersion) != reviewAPIVersion || string(in.Kind) != reviewKind {
		return nil, fmt.Errorf("not a ConversionReview of apiextensions.k8s.io/v1")
	}
	if in.Request == nil {
		return nil, errors.New("no request")
	}
	var uid types.UID
	if len(in.Request.UID) > maxUIDBytes || json.Unmarshal(in.Request.UID, &uid) != nil {
		return nil, fmt.Errorf("request.uid is not a string of at most %d bytes", maxUIDBytes-2)
	}
	var version string
	if len(in.Request.DesiredAPIVersion) > maxVersionBytes || json.Unmarshal(in.Request.DesiredAPIVersion, &version) != nil {
		return nil, fmt.Errorf("request.desiredAPIVersion is not a string of at most %d bytes", maxVersionBytes-2)
	}
	review := &apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: uid, DesiredAPIVersion: version}}
	dec := json.NewDecoder(bytes.NewReader(in.Request.Objects))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New("request.objects is not a list")
	}
	// One element at a time into the same buffer (RawMessage reuses it):
	// nothing is kept of one that is refused.
	var elem json.RawMessage
	for dec.More() {
		if err := dec.Decode(&elem); err != nil {
			return nil, fmt.Errorf("request.objects: %w", err)
		}
		n := len(review.Request.Objects)
		if len(elem) < minObjectBytes || elem[0] != '{' {
			return nil, fmt.Errorf("request.objects[%d] is not an object of %d bytes or more", n, minObjectBytes)
		}
		if n == maxObjects {
			return nil, fmt.Errorf("request.objects holds more than %d objects", maxObjects)
		}
		review.Request.Objects = append(review.Request.Objects, runtime.RawExtension{Raw: bytes.Clone(elem)})
	}
	return review, nil
}

// encodeJSON is v as encoding/json writes it, but for the escaping of <,
// > and & (which runtime.Encode and json.Marshal do), and without the
// Encoder's last newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
