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
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
)

// storedAlphaBar and storedV1Bar are Bars as the API server sends them,
// metadata and all.
const (
	storedAlphaBar = `{"apiVersion":"barcontroller.dev/v1alpha1","kind":"Bar","metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"barcontroller.dev/v1alpha1\",\"kind\":\"Bar\",\"metadata\":{\"annotations\":{},\"name\":\"web\",\"namespace\":\"default\"},\"spec\":{\"deploymentName\":\"web-nginx\",\"image\":\"nginx:1.28.0\",\"replicas\":2}}\n","barcontroller.dev/v1-template-resources":"{\"limits\":{\"memory\":\"128Mi\"},\"requests\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"}}"},"creationTimestamp":"2026-01-02T03:04:05Z","generation":3,"labels":{"team":"a"},"managedFields":[{"apiVersion":"barcontroller.dev/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:team":{}}},"f:spec":{".":{},"f:deploymentName":{},"f:image":{},"f:replicas":{}}},"manager":"kubectl-client-side-apply","operation":"Update","time":"2026-01-02T03:04:05Z"},{"apiVersion":"barcontroller.dev/v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{},"f:availableReplicas":{},"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{}}},"manager":"bar-controller","operation":"Apply","subresource":"status","time":"2026-01-02T03:04:09Z"}],"name":"web","namespace":"default","resourceVersion":"4242","uid":"6f1c9a52-3b8e-4d0a-9b7e-2c1d0e5f6a7b"},"spec":{"deploymentName":"web-nginx","image":"nginx:1.28.0","replicas":2},"status":{"availableReplicas":2,"conditions":[{"lastTransitionTime":"2026-01-02T03:04:09Z","message":"Deployment web-nginx has 2 of 2 replicas available","observedGeneration":3,"reason":"DeploymentAvailable","status":"True","type":"Ready"}],"observedGeneration":3}}`
	storedV1Bar    = `{"apiVersion":"barcontroller.dev/v1","kind":"Bar","metadata":{"creationTimestamp":"2026-01-02T03:04:05Z","generation":3,"labels":{"team":"a"},"managedFields":[{"apiVersion":"barcontroller.dev/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:team":{}}},"f:spec":{"f:deployment":{"f:name":{}},"f:replicas":{},"f:template":{"f:image":{},"f:resources":{"f:limits":{"f:memory":{}},"f:requests":{"f:cpu":{},"f:memory":{}}}}}},"manager":"kubectl","operation":"Apply","time":"2026-01-02T03:04:05Z"},{"apiVersion":"barcontroller.dev/v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:availableReplicas":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{}}},"manager":"bar-controller","operation":"Apply","subresource":"status","time":"2026-01-02T03:04:09Z"}],"name":"web","namespace":"default","resourceVersion":"4242","uid":"6f1c9a52-3b8e-4d0a-9b7e-2c1d0e5f6a7b"},"spec":{"deployment":{"name":"web-nginx"},"replicas":2,"template":{"image":"nginx:1.28.0","resources":{"limits":{"memory":"128Mi"},"requests":{"cpu":"100m","memory":"64Mi"}}}},"status":{"availableReplicas":2,"conditions":[{"lastTransitionTime":"2026-01-02T03:04:09Z","message":"Deployment web-nginx has 2 of 2 replicas available","observedGeneration":3,"reason":"DeploymentAvailable","status":"True","type":"Ready"}],"observedGeneration":3}}`
)

// The budget's measure of a Bar the API server sends is about its bytes,
// as it was before objects were weighed: its resources, or the
// annotation that carries them, weigh twice, and nothing else counts.
func TestBarsWeighTheirBytes(t *testing.T) {
	for _, bar := range []string{storedAlphaBar, storedV1Bar} {
		s, err := shapeOf([]byte(bar))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%.45s: %d bytes, %d containers, %d keys and other values (%d quantities): weight %d", bar, s.bytes, s.containers, s.values, s.quantities, s.weight())
		if w := s.weight(); w < int64(len(bar)) || w > int64(len(bar))*11/10 {
			t.Errorf("%.45s weighs %d, want its %d bytes and at most a tenth more", bar, w, len(bar))
		}
	}
}

// reviewOf is a ConversionReview to version of these objects.
func reviewOf(to string, objects ...string) []byte {
	return []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"r","desiredAPIVersion":"barcontroller.dev/` +
		to + `","objects":[` + strings.Join(objects, ",") + `]}}`)
}

// list is n of the elements f gives, comma-separated.
func list(n int, f func(i int) string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f(i))
	}
	return b.String()
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%q is not in the test Bar", old)
	}
	return strings.Replace(s, old, new, 1)
}

// Issue 39, ninth review, C1: a Bar of 4 MiB whose status held 1.4
// million "{}" conditions took 465 MiB of heap, 110 times what the budget
// counted for it; ownerReferences and managedFields the same. Now the
// budget counts what objects weigh, and whatever values an object is made
// of, converting it allocates about what a Bar the API server sends does
// for the same weight: here at most twice the most such Bars allocated
// (both measured in this run, as bytes allocated in all, which bounds the
// peak).
func TestWeightBoundsTheCost(t *testing.T) {
	const size = 256 << 10
	many := func(bar string) []string {
		var objects []string
		for n := 0; n < size; n += len(bar) {
			objects = append(objects, bar)
		}
		return objects
	}
	empties := func(n int) string { return list(n, func(int) string { return "{}" }) }
	bars := []struct {
		name, to string
		objects  []string
	}{
		{"Bars in v1alpha1", "v1", many(storedAlphaBar)},
		{"Bars in v1", "v1alpha1", many(storedV1Bar)},
	}
	shapes := []struct {
		name, to string
		object   string
	}{
		{"conditions {}", "v1", replaceOnce(t, storedAlphaBar, `"conditions":[`, `"conditions":[`+empties(size/6)+",")},
		{"managedFields {}", "v1", replaceOnce(t, storedAlphaBar, `"managedFields":[`, `"managedFields":[`+empties(size/6)+",")},
		{"ownerReferences {}", "v1", replaceOnce(t, storedAlphaBar, `"name":"web",`, `"name":"web","ownerReferences":[`+empties(size/6)+"],")},
		{"claims {}", "v1alpha1", replaceOnce(t, storedV1Bar, `"resources":{`, `"resources":{"claims":[`+empties(size/6)+"],")},
		{"conditions null", "v1", replaceOnce(t, storedAlphaBar, `"conditions":[`, `"conditions":[`+list(size/5, func(int) string { return "null" })+",")},
		{"ownerReferences null", "v1", replaceOnce(t, storedAlphaBar, `"name":"web",`, `"name":"web","ownerReferences":[`+list(size/5, func(int) string { return "null" })+"],")},
		{"finalizers null", "v1", replaceOnce(t, storedAlphaBar, `"name":"web",`, `"name":"web","finalizers":[`+list(size/5, func(int) string { return "null" })+"],")},
		{`finalizers ""`, "v1", replaceOnce(t, storedAlphaBar, `"name":"web",`, `"name":"web","finalizers":[`+list(size/3, func(int) string { return `""` })+"],")},
		{"labels", "v1", replaceOnce(t, storedAlphaBar, `"labels":{`, `"labels":{`+list(size/10, func(i int) string { return fmt.Sprintf(`"%x":""`, i) })+",")},
		{"limits", "v1alpha1", replaceOnce(t, storedV1Bar, `"limits":{`, `"limits":{`+list(size/12, func(i int) string { return fmt.Sprintf(`"%x":"1"`, i) })+",")},
		{"limits in the annotation", "v1", replaceOnce(t, storedAlphaBar, `{\"limits\":{`, `{\"limits\":{`+list(size/16, func(i int) string { return fmt.Sprintf(`\"%x\":\"1\"`, i) })+",")},
		{"fieldsV1", "v1", replaceOnce(t, storedAlphaBar, `"fieldsV1":{`, `"fieldsV1":{`+list(size/10, func(i int) string { return fmt.Sprintf(`"%x":{}`, i) })+",")},
		{"a resource name of '<'", "v1alpha1", replaceOnce(t, storedV1Bar, `"limits":{`, `"limits":{"`+strings.Repeat("<", size)+`":"1",`)},
		{`a resource name of '"'`, "v1alpha1", replaceOnce(t, storedV1Bar, `"limits":{`, `"limits":{"`+strings.Repeat(`\"`, size/2)+`":"1",`)},
		{`the annotation in v1, of '"' and escaped U+2028`, "v1alpha1", replaceOnce(t, storedV1Bar, `"labels":{`, `"annotations":{"barcontroller.dev/v1-template-resources":"`+strings.Repeat(`\"\\\u2028`, size/10)+`"},"labels":{`)},
	}
	perWeight := func(name, to string, objects ...string) float64 {
		return costPerWeight(t, name, to, true, objects...)
	}
	var floor float64
	for _, b := range bars {
		floor = max(floor, perWeight(b.name, b.to, b.objects...))
	}
	for _, s := range shapes {
		if got := perWeight(s.name, s.to, s.object); got > 2*floor {
			t.Errorf("%s: converting allocated %.1f times its weight, want at most %.1f (twice the Bars')", s.name, got, 2*floor)
		}
	}
	// A value of the wrong type in an array fails the decoding, after
	// the elements before it were decoded: it costs no more.
	wrong := replaceOnce(t, storedAlphaBar, `"conditions":[`, `"conditions":[`+list(size/5, func(int) string { return "{}" })+",0,")
	if got := costPerWeight(t, "conditions {}, then 0", "v1", false, wrong); got > 2*floor {
		t.Errorf("a wrong type after many elements: converting allocated %.1f times its weight, want at most %.1f (twice the Bars')", got, 2*floor)
	}
}

// costPerWeight serves a review of objects, converted to version to, and
// returns what it allocated per weight; it fails the test unless the
// review succeeds (or fails, with !succeed) with an answer of at most
// three times the weight.
func costPerWeight(t *testing.T, name, to string, succeed bool, objects ...string) float64 {
	t.Helper()
	var weight int64
	for _, o := range objects {
		s, err := shapeOf([]byte(o))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		weight += s.weight()
	}
	rec, allocated := serveReview(t, reviewOf(to, objects...))
	want := `"status":"Success"`
	if !succeed {
		want = `"status":"Failure"`
	}
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("%s: %d: %.300s", name, rec.Code, rec.Body.String())
	}
	// The answer is memory too, counted in the allocation above. An
	// empty condition comes back with its fields written out (about
	// 70 bytes for a weight of 64 and 3 bytes, or of 40 and 5 for a
	// null), no string grows
	// (what travels nested weighs twice; invalid UTF-8 and raw
	// U+2028 are refused): at most three times the weight.
	if got := int64(rec.Body.Len()); got > 3*weight {
		t.Errorf("%s: an answer of %d bytes for a weight of %d, want at most three times it", name, got, weight)
	}
	ratio := float64(allocated) / float64(weight)
	t.Logf("%-24s weight %8d (%5.1f times the bytes), allocated %5.1f times the weight", name, weight, float64(weight)/float64(len(strings.Join(objects, ","))), ratio)
	return ratio
}

// The review of C1 itself: a review too heavy for the largest part of the
// budget is refused before any object is decoded, having allocated a few
// times its body (reading it, and the objects' raw copies).
func TestHeavyReviewsAreRefusedCheaply(t *testing.T) {
	bar := replaceOnce(t, storedAlphaBar, `"conditions":[`, `"conditions":[`+list((maxRequestBytes-4<<10)/3, func(int) string { return "{}" })+",")
	body := reviewOf("v1", bar)
	rec, allocated := serveReview(t, body)
	t.Logf("%d: %s; allocated %d MiB for a body of %d MiB", rec.Code, strings.TrimSpace(rec.Body.String()), allocated>>20, len(body)>>20)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("%d, want 413", rec.Code)
	}
	if bound := 12 * uint64(len(body)); allocated > bound {
		t.Errorf("allocated %d MiB, want at most %d (12 times the body)", allocated>>20, bound>>20)
	}
}

// Ninth review, m1: a quantity of 4 MiB of digits took 46 s of CPU to
// convert; tenth review, C1: one of 28 bytes with an exponent of eight
// digits took 94 s of CPU and 252 MiB, and still had no answer. A quantity
// the CRD would refuse is refused before it is parsed; one as long as it
// allows converts.
func TestUnboundedQuantitiesAreRefused(t *testing.T) {
	c := NewConverter()
	at := func(q string) string {
		return replaceOnce(t, storedV1Bar, `"cpu":"100m"`, `"cpu":"`+q+`"`)
	}
	if resp := review(t, c, "barcontroller.dev/v1alpha1", at(strings.Repeat("1", barcontroller.MaxQuantityBytes))); resp.Result.Status != "Success" {
		t.Errorf("a quantity of %d bytes: %s, want it converted", barcontroller.MaxQuantityBytes, resp.Result.Message)
	}
	for _, q := range []string{
		strings.Repeat("1", barcontroller.MaxQuantityBytes+1),
		strings.Repeat("1", maxRequestBytes-4<<10),
		"1111111111111111111e30000000",
		"1e100",
	} {
		rec, _ := serveReview(t, reviewOf("v1alpha1", at(q)))
		want := "spec.template.resources.requests.cpu is a quantity the Bar CRD refuses"
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"Failure"`) || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("a quantity of %d bytes %.40q: %d %.300s, want a failure that says %q", len(q), q, rec.Code, rec.Body.String(), want)
		}
	}
}

// scan counts what encoding/json would decode, and finds the paths that
// matter however their keys are written.
func TestScan(t *testing.T) {
	for _, tc := range []struct {
		in                             string
		containers, values, quantities int
		unbounded                      string
	}{
		{in: `{}`, containers: 1},
		{in: ` [ 1 , "a" , true , null , {} , [] ] `, containers: 3, values: 4},
		{in: `{"a":{"b":["x\"y\\",-1.5e3]}}`, containers: 3, values: 4},
		{in: `{"metadata":{"managedFields":[{"fieldsV1":{"a":{},"b":[1,2]},"manager":"m"}]}}`, containers: 4, values: 5},
		{in: `{"spec":{"template":{"resources":{"limits":{"cpu":"1","memory":2}}}}}`, containers: 5, values: 8, quantities: 2},
		{in: `{"sp\u0065c":{"template":{"resources":{"requests":{"cpu":"` + strings.Repeat("1", 65) + `"}}}}}`, containers: 5, values: 6, quantities: 1, unbounded: "spec.template.resources.requests.cpu"},
		{in: `{"spec":{"template":{"resources":{"limits":{"cpu":"1e99","memory":"5Ei","a":"2E","b":1e-9}}}}}`, containers: 5, values: 12, quantities: 4},
		// Ten reviews in, a short quantity with a large exponent: 28
		// bytes that parse to about 10^30000000.
		{in: `{"spec":{"template":{"resources":{"limits":{"cpu":"1111111111111111111e30000000"}}}}}`, containers: 5, values: 6, quantities: 1, unbounded: "spec.template.resources.limits.cpu"},
		{in: `{"spec":{"template":{"resources":{"limits":{"cpu":1e100}}}}}`, containers: 5, values: 6, quantities: 1, unbounded: "spec.template.resources.limits.cpu"},
		{in: `{"spec":{"template":{"resources":{"limits":{"cpu":"1\u00653000"}}}}}`, containers: 5, values: 6, quantities: 1, unbounded: "spec.template.resources.limits.cpu"},
		{in: `{"metadata":{"annotations":{"barcontroller.dev/v1-template-resources":"{\"limits\":{\"cpu\":\"1\"}}"}}}`, containers: 5, values: 7, quantities: 1},
		{in: `{"metadata":{"annotations":{"barcontroller.dev/v1-template-resources":"{\"annotation\":\"x\",\"resources\":{\"requests\":{\"a\":\"1\",\"b\":\"2\"}}}"}}}`, containers: 6, values: 12, quantities: 2},
		// Twelfth review, C3: the escape is undone in the annotation's
		// contents, which are still weighed.
		{in: `{"metadata":{"annotations":{"barcontroller.dev/v1-template-resources":"{\"claims\":[{\"name\":\"\u2028\"},{}]}"}}}`, containers: 7, values: 7},
		{in: `{"metadata":{"creationTimestamp":"2026-01-02T03:04:05.123456789+01:00"}}`, containers: 2, values: 3},
		{in: `{"metadata":{"annotations":{"barcontroller.dev/v1-template-resources":"not json"}}}`, containers: 3, values: 4},
	} {
		s, err := scan([]byte(tc.in), nil, true)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if s.containers != tc.containers || s.values != tc.values || s.quantities != tc.quantities || s.unbounded != tc.unbounded {
			t.Errorf("%s: %d containers, %d keys and other values, %d quantities, long %q; want %d, %d, %d, %q",
				tc.in, s.containers, s.values, s.quantities, s.unbounded, tc.containers, tc.values, tc.quantities, tc.unbounded)
		}
	}
	for _, in := range []string{``, `{`, "\"\xff\"", `{"a":"` + "\xed\xa0\x80" + `"}`, "\"a\u2028\"", "[\"\u2029\"]",
		// Twelfth review, C2: a time's or a number's decoding error quotes it.
		`{"metadata":{"creationTimestamp":"2026-01-02T03:04:05Z` + strings.Repeat("é", 32) + `"}}`,
		`{"status":{"conditions":[{"lastTransitionTime":"` + strings.Repeat("1", 65) + `"}]}}`,
		`{"spec":{"replicas":` + strings.Repeat("1", 65) + `}}`, `{"a"}`, `{"a":}`, `[1,]`, `[1 2]`, `"abc`, `{} {}`, `{"a":1,}`, strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2)} {
		if _, err := scan([]byte(in), nil, true); err == nil {
			t.Errorf("%.40q: no error, want one", in)
		}
	}
}

// Tenth review, C2: a BarList's items were weighed as anything, so its
// quantities and its annotations' JSON went uncounted and unchecked (one
// 4 MiB POST allocated 301 MiB). Only Bars are converted.
func TestOnlyBarsAreWeighed(t *testing.T) {
	for _, obj := range []string{
		`{"apiVersion":"barcontroller.dev/v1alpha1","kind":"BarList","items":[]}`,
		`{"apiVersion":"barcontroller.dev/v1","kind":"Status"}`,
		`{"apiVersion":"apps/v1","kind":"Bar"}`,
		`{"apiVersion":"barcontroller.dev/v1","kind":"Bar","KIND":"BarList"}`,
		// Eleventh review, C1 and C2: the decoder takes the internal
		// version, whose fields have no JSON names: no path was found.
		`{"apiVersion":"barcontroller.dev/__internal","kind":"Bar","Spec":{"Template":{"Resources":{"limits":{"cpu":"1e100000"}}}}}`,
	} {
		if _, err := shapeOf([]byte(obj)); err == nil {
			t.Errorf("%s: weighed, want it refused", obj)
		}
	}
	if _, err := shapeOf([]byte(storedV1Bar)); err != nil {
		t.Errorf("a Bar: %v", err)
	}
}

// The quantities the webhook converts cost little whatever they say:
// the largest exponent and the most digits it allows, converted both
// ways, allocate about what the Bar without them does.
func TestBoundedQuantitiesAreCheap(t *testing.T) {
	worst := []string{
		strings.Repeat("9", barcontroller.MaxQuantityBytes-3) + "e99",
		"0." + strings.Repeat("0", barcontroller.MaxQuantityBytes-7) + "1e-99",
		strings.Repeat("7", barcontroller.MaxQuantityBytes),
	}
	v1 := storedV1Bar
	for i, q := range worst {
		v1 = replaceOnce(t, v1, `"limits":{`, fmt.Sprintf(`"limits":{"q%d":"%s",`, i, q))
	}
	_, plain := serveReview(t, reviewOf("v1alpha1", storedV1Bar))
	rec, allocated := serveReview(t, reviewOf("v1alpha1", v1))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"Success"`) {
		t.Fatalf("%d: %.300s", rec.Code, rec.Body.String())
	}
	t.Logf("allocated %d bytes, %d for the Bar without them", allocated, plain)
	if allocated > 2*plain+64<<10 {
		t.Errorf("allocated %d bytes, want at most twice the %d of the Bar without them, and 64 KiB", allocated, plain)
	}
}
