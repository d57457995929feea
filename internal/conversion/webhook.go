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

// Package conversion serves the Bar CRD's conversion webhook: the API
// server stores every Bar in one version (v1) and asks this webhook,
// with a ConversionReview, whenever a client reads or writes a Bar in
// another version, or an object stored in an older version is read.
//
// The webhook converts through the hub, as Kubernetes' own API server
// converts its built-in types: decode the object in the version it comes
// in, convert it to the internal version (pkg/apis/barcontroller), convert
// that to the version asked for, with the functions conversion-gen
// generated plus the hand-written ones (pkg/apis/barcontroller/install).
// It keeps no state and needs no leader: every replica serves it.
package conversion

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/metrics"
	"github.com/barcontroller/bar-controller/internal/serving"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller/install"
)

// Path is where the CRD's webhook clientConfig points.
const Path = "/convert"

// Converter converts Bars between the versions of the API.
type Converter struct {
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
}

// NewConverter returns a Converter that knows every version of the Bar API.
func NewConverter() *Converter {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return &Converter{scheme: scheme, codecs: serializer.NewCodecFactory(scheme)}
}

// ServeHTTP answers a ConversionReview (apiextensions.k8s.io/v1).
func (c *Converter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		metrics.RecordConversion(metrics.ConversionInvalid, 0, time.Since(start))
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.Is(err, errBusy) {
			metrics.RecordConversion(metrics.ConversionBusy, 0, time.Since(start))
			refuseBusy(w)
			return
		}
		if errors.As(err, &tooBig) {
			metrics.RecordConversion(metrics.ConversionTooLarge, 0, time.Since(start))
			http.Error(w, tooLarge(r.ContentLength), http.StatusRequestEntityTooLarge)
			return
		}
		// Mostly the server's read timeout: a body sent too slowly.
		metrics.RecordConversion(metrics.ConversionInvalid, 0, time.Since(start))
		http.Error(w, fmt.Sprintf("reading the request: %v", err), http.StatusBadRequest)
		return
	}
	review, err := decodeReview(body)
	body = nil // the review holds its own copies; the collector may take these bytes
	if err != nil {
		metrics.RecordConversion(metrics.ConversionInvalid, 0, time.Since(start))
		http.Error(w, clip(fmt.Sprintf("not a ConversionReview: %v", err)), http.StatusBadRequest)
		return
	}
	// Converting costs by the value, not the byte: the request's part of
	// the budget grows to what its objects weigh before any is decoded
	// (shape.go).
	weight, err := weigh(review.Request.Objects)
	switch {
	case err != nil:
		review.Response = &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: failure(err.Error())}
	case weight > addressShare:
		metrics.RecordConversion(metrics.ConversionTooLarge, 0, time.Since(start))
		http.Error(w, fmt.Sprintf("the review's objects weigh %d bytes, more than the %d of the largest review (a list must be paged smaller)", weight, maxRequestBytes), http.StatusRequestEntityTooLarge)
		return
	default:
		if cl := claimOf(r); cl != nil && !cl.growTo(weight) {
			metrics.RecordConversion(metrics.ConversionBusy, 0, time.Since(start))
			refuseBusy(w)
			return
		}
		review.Response = c.convert(review.Request)
	}
	result := metrics.ConversionSuccess
	if review.Response.Result.Status != metav1.StatusSuccess {
		result = metrics.ConversionFailure
		logger.Error(nil, "Conversion failed", "to", clip(review.Request.DesiredAPIVersion), "reason", review.Response.Result.Message)
	} else {
		// The source lets an operator find the API server's address for
		// --conversion-webhook-api-server-cidrs (docs/install.md).
		logger.V(4).Info("Converted", "objects", len(review.Request.Objects), "to", review.Request.DesiredAPIVersion, "remote", r.RemoteAddr)
	}
	objects := len(review.Request.Objects)
	review.Request = nil // the API server reads only the response
	answer, err := encodeJSON(review)
	if err != nil {
		logger.Error(err, "Encoding the ConversionReview response")
		http.Error(w, "encoding the response failed", http.StatusInternalServerError)
		return
	}
	// The answer is memory the body's part of the budget did not count
	// when it is larger: its part grows to it, or it is refused.
	if c := claimOf(r); c != nil && !c.growTo(int64(len(answer))) {
		metrics.RecordConversion(metrics.ConversionBusy, objects, time.Since(start))
		refuseBusy(w)
		return
	}
	// The answer is held, and the request's part of the budget with it,
	// until the caller has taken it: as long as a body may take to come,
	// for its size, and no longer. With the server's write timeout alone
	// (answerTimeout), a caller that sent a review and read none of its
	// answer held its part of the budget for 15 s at the cost of one
	// send: three Pods kept the whole budget so, and 62 of 179 of the API
	// server's calls failed, retries and all (issue 39, seventh review,
	// M1). Now holding n bytes costs taking them again every
	// serving.BodyGrace + n/serving.MinBodyRate, as a body does.
	_ = http.NewResponseController(w).SetWriteDeadline(answerDeadline(start, time.Now(), len(answer)))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
	if _, err := w.Write(answer); err != nil {
		logger.Error(err, "Writing the ConversionReview response")
	}
	metrics.RecordConversion(result, objects, time.Since(start))
}

// convert answers one request: every object converted, or a failure that
// says which object and why (the API server then fails the client's
// request with that message). Its objects must have been weighed (weigh):
// that refuses what decoding would spend without bound on, so convert is
// not an entry point of its own.
func (c *Converter) convert(req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	target, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil || target.Group != barcontroller.GroupName || !c.scheme.IsVersionRegistered(target) {
		resp.Result = failure(fmt.Sprintf("cannot convert to %q: not a version of the %s API", clip(req.DesiredAPIVersion), barcontroller.GroupName))
		return resp
	}
	decoder := c.codecs.UniversalDeserializer()
	for i, raw := range req.Objects {
		out, err := c.convertOne(raw.Raw, target, decoder)
		if err != nil {
			resp.ConvertedObjects = nil
			resp.Result = failure(fmt.Sprintf("object %d of %d: %v", i+1, len(req.Objects), err))
			return resp
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	resp.Result = metav1.Status{Status: metav1.StatusSuccess}
	return resp
}

func (c *Converter) convertOne(raw []byte, target schema.GroupVersion, decoder runtime.Decoder) ([]byte, error) {
	in, gvk, err := decoder.Decode(raw, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Group != barcontroller.GroupName || gvk.Version == runtime.APIVersionInternal {
		return nil, fmt.Errorf("%s is not a version of the %s API", gvk.GroupVersion(), barcontroller.GroupName)
	}
	if gvk.GroupVersion() == target {
		return raw, nil // the API server does not ask this, but it is the answer
	}
	hub, err := c.scheme.ConvertToVersion(in, runtime.InternalGroupVersioner)
	if err != nil {
		return nil, fmt.Errorf("converting %s to the internal version: %w", gvk, err)
	}
	versioned, err := c.scheme.ConvertToVersion(hub, target)
	if err != nil {
		return nil, fmt.Errorf("converting to %s: %w", target, err)
	}
	return encodeJSON(versioned)
}

// errBusy: the budget had no room for the body's next bytes (limit.go).
var errBusy = errors.New("the webhook's budget is full")

// readBody reads a request's body, at most maxRequestBytes of it. Its
// buffer grows as the bytes arrive, by half (at least minReservation) up
// to the declared length, and every growth is reserved from the request's
// claim first (limit.go): a declared length costs nothing until its bytes
// come, and a body that stops arriving holds at most half again what it
// sent. Doubling, as io.ReadAll grows, held up to twice what was sent: a
// caller that sent half of a 4 MiB body and stopped held 4 MiB (issue 39,
// thirteenth review, m1). Growing by half allocates about three times the
// body in all, where doubling allocated two; a quarter would allocate five,
// past what TestTinyObjectsAreRefusedCheaply allows a review (six times its
// body, decoding included).
// The bytes read are counted as they arrive, so a flood's cost shows in
// the metrics whether its requests finish or not.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := countingReader{http.MaxBytesReader(w, r.Body, maxRequestBytes)}
	// One byte more than declared: the read that finds the end needs room.
	end := r.ContentLength + 1
	if r.ContentLength < 0 || r.ContentLength > maxRequestBytes {
		end = maxRequestBytes + 1 // unknown or refused: up to the limit
	}
	c := claimOf(r)
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			size := min(int64(cap(buf))+max(int64(cap(buf))/2, minReservation), end)
			if size <= int64(cap(buf)) {
				size = int64(cap(buf)) + minReservation // past the declared end: MaxBytesReader decides
			}
			if c != nil && !c.growTo(size) {
				return nil, errBusy
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

type countingReader struct{ r io.Reader }

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	metrics.AddConversionBytesRead(n)
	return n, err
}

// failure is a failed conversion's status. Its message is clipped to
// maxMessageBytes: it quotes what the caller sent (a version, an object's
// apiVersion in the decoder's error), and a 4 MiB desiredAPIVersion of
// control bytes, quoted (4 bytes each) and then escaped in the answer,
// made a 20 MiB answer and a 38 MB log line of one POST (issue 39, ninth
// review, C2).
func failure(msg string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Message: clip(msg)}
}

// maxMessageBytes: a failure's message, enough for the API server's
// error to say which object failed and why.
const maxMessageBytes = 512

// clip is s cut to maxMessageBytes, on a rune boundary, marked as cut.
func clip(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	cut := maxMessageBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "... (cut)"
}

// answerDeadline is when an answer of n bytes, written from now on, must
// have been taken: serving's pace for a body of that size, but never past
// the server's write timeout, counted from the request's start.
func answerDeadline(start, now time.Time, n int) time.Time {
	paced := now.Add(serving.BodyGrace + time.Duration(float64(n)/serving.MinBodyRate*float64(time.Second)))
	if limit := start.Add(answerTimeout); limit.Before(paced) {
		return limit
	}
	return paced
}
