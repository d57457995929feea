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
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// serveReview has the Converter answer body, and returns the answer and
// the bytes the process allocated meanwhile.
func serveReview(t *testing.T, body []byte) (*httptest.ResponseRecorder, uint64) {
	t.Helper()
	c := NewConverter()
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	return rec, after.TotalAlloc - before.TotalAlloc
}

// Issue 39, eighth review, C1: a review of 4 MB of tiny elements
// ("0," or "{},") took about 40 times its body to decode, 169 MiB, and
// one POST killed the conversion-only Pod. Now each element is checked
// before it gets one of its own, and the review is refused having
// allocated a few times its body: reading it (its buffer doubles), its
// objects' raw copy, and the decoder's.
func TestTinyObjectsAreRefusedCheaply(t *testing.T) {
	for _, elem := range []string{"0", "{}", `{"a":1}`} {
		n := (maxRequestBytes - 200) / (len(elem) + 1)
		body := []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"r","desiredAPIVersion":"barcontroller.dev/v1","objects":[` +
			strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + `]}}`)
		rec, allocated := serveReview(t, body)
		t.Logf("%d elements %s: %d, allocated %d MiB for a body of %d MiB", n, elem, rec.Code, allocated>>20, len(body)>>20)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("a review of %d elements %s: %d, want 400", n, elem, rec.Code)
		}
		if bound := 6 * uint64(len(body)); allocated > bound {
			t.Errorf("a review of %d elements %s allocated %d MiB, want at most %d (6 times its body)", n, elem, allocated>>20, bound>>20)
		}
	}
}

// Issue 39, eighth review, C2: encoding/json's escaping of <, > and & made
// an answer six times its review (a Bar whose annotation held 4 MB of
// '<': 25 MB), memory no part of the budget counted. Now the answer is
// about the review's size, whatever its bytes.
func TestAnswersAreNotEscaped(t *testing.T) {
	pad := strings.Repeat("<>&", 64<<10)
	bar := strings.Replace(alphaBar, `"labels":{"team":"a"}`, `"labels":{"team":"a"},"annotations":{"pad":"`+pad+`"}`, 1)
	if bar == alphaBar {
		t.Fatal("the test Bar has no labels to put the annotation beside")
	}
	body := []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"r","desiredAPIVersion":"barcontroller.dev/v1","objects":[` + bar + `]}}`)
	rec, _ := serveReview(t, body)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"Success"`) {
		t.Fatalf("%d: %.300s", rec.Code, rec.Body.String())
	}
	if got := rec.Body.Len(); got > len(body)+4<<10 {
		t.Errorf("the answer is %d bytes for a review of %d, want about as many", got, len(body))
	}
	if !strings.Contains(rec.Body.String(), pad) {
		t.Error("the answer does not carry the annotation's bytes as they came")
	}
}

// Issue 39, ninth review, C2: a failure's message quoted what the caller
// sent, whole: a 4 MiB desiredAPIVersion of control bytes made a 20 MiB
// answer (and a 38 MB log line). Now a version longer than any is refused
// before it is decoded, and a failure's message is clipped. Twelfth
// review, M1: the uid, echoed, is bounded too; the review's own
// apiVersion and kind are the API server's or it is refused.
func TestFailuresDoNotEchoTheCaller(t *testing.T) {
	reviewWith := func(apiVersion, uid, version string) []byte {
		return []byte(`{"apiVersion":"` + apiVersion + `","kind":"ConversionReview","request":{"uid":"` + uid + `","desiredAPIVersion":"` + version + `","objects":[` + alphaBar + `]}}`)
	}
	version := strings.Repeat("\x7f", maxVersionBytes-2)
	rec, _ := serveReview(t, reviewWith("apiextensions.k8s.io/v1", "r", version))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"Failure"`) {
		t.Fatalf("%d: %.300s", rec.Code, rec.Body.String())
	}
	if got := rec.Body.Len(); got > 4<<10 {
		t.Errorf("the failure's answer is %d bytes for a version of %d, want it clipped", got, len(version))
	}
	for name, body := range map[string][]byte{
		"a version of 1 MiB":                 reviewWith("apiextensions.k8s.io/v1", "r", strings.Repeat("\x7f", 1<<20)),
		"a uid of 1 MiB of invalid UTF-8":    reviewWith("apiextensions.k8s.io/v1", strings.Repeat("\xff", 1<<20), "barcontroller.dev/v1"),
		"an apiVersion of 1 MiB":             reviewWith(strings.Repeat("\xff", 1<<20), "r", "barcontroller.dev/v1"),
		"an apiVersion other than the API's": reviewWith("apiextensions.k8s.io/v1beta1", "r", "barcontroller.dev/v1"),
	} {
		rec, allocated := serveReview(t, body)
		if rec.Code != http.StatusBadRequest || rec.Body.Len() > 4<<10 {
			t.Errorf("%s: %d, %d bytes: %.200q; want 400, short", name, rec.Code, rec.Body.Len(), rec.Body.String())
		}
		if bound := 6 * uint64(len(body)); allocated > bound {
			t.Errorf("%s: allocated %d MiB, want at most %d (6 times the body)", name, allocated>>20, bound>>20)
		}
	}
}
