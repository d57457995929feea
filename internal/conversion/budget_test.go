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
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The tests here hold bodies in the webhook while the API server's review
// comes, and what they assert follows from the order of events alone
// (watchedWebhook, in watch_test.go): a request is held, refused or
// answered when the webhook's handler says so, not when a clock says it
// should have happened by.

// Issue 39, item 3: two addresses declare bodies as large as the webhook
// takes and send none of them. Reserved by their declared length, they
// held the whole budget (8 MiB) until the read timeout, and every review
// of the API server, from a third address, was refused 429. Reserved as
// their bytes arrive, they hold next to nothing, and the API server's
// review converts while all four still wait for their bodies.
func TestStalledBodiesLeaveTheBudgetToOthers(t *testing.T) {
	w := watchWebhook(t, nil)
	// Each address declares twice the largest review, in two requests
	// (all the budget between the two addresses), and sends no body.
	var stalled []string
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		for j := range 2 {
			id := fmt.Sprintf("stalled-%s-%d", src, j)
			w.send(t, src, id, maxRequestBytes, 0)
			stalled = append(stalled, id)
		}
	}
	for _, id := range stalled {
		s := w.await(t, id, "in the Converter or refused", func(s requestState) bool { return s.entered || s.answered != 0 })
		if !s.entered {
			t.Errorf("%s declared %d bytes and sent none: answered %d, want admitted (its length is not reserved)",
				id, maxRequestBytes, s.answered)
		}
	}

	body, _ := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{UID: "api-server", DesiredAPIVersion: "barcontroller.dev/v1",
			Objects: []runtime.RawExtension{{Raw: []byte(alphaBar)}}},
	})
	code, err := w.post("api-server", body)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK {
		t.Errorf("the API server's review, from another address, while two addresses stall bodies of %d bytes: %d, want 200",
			2*maxRequestBytes, code)
	}
	// Nothing here cuts a stalled body: the admitted ones were all still
	// waiting for theirs while the review converted.
	for _, id := range stalled {
		if s := w.state(id); s.entered && s.answered != 0 {
			t.Errorf("%s was answered %d before the test ended", id, s.answered)
		}
	}
}

// Two addresses send 3 MiB of a body each, and stop one byte short: they
// hold 6 MiB of the budget for as long as they stay connected, and the
// API server's largest review no longer fits. Where the operator named
// the API server's addresses (--conversion-webhook-api-server-cidrs, which
// handler is given), the
// others together leave it one largest review's room: the second address
// is refused as its body would cut into that room, and the API server's
// review converts.
func TestAPIServerRoom(t *testing.T) {
	const size = 3 << 20
	for _, tc := range []struct {
		name      string
		apiServer []netip.Prefix
		// secondHolds says whether the second address may hold its 3 MiB
		// beside the first's.
		secondHolds bool
		want        int
	}{
		{"API server not named", nil, true, http.StatusTooManyRequests},
		{"API server named", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := watchWebhook(t, tc.apiServer)
			// One address after the other, each until the webhook holds
			// its body or has refused it, so which one is refused does not
			// depend on how their bytes interleave.
			for i, src := range []string{"127.0.0.2", "127.0.0.3"} {
				id := "holder-" + src
				w.send(t, src, id, size, size-1)
				s := w.await(t, id, "holding its body or refused", func(s requestState) bool { return s.read >= size-1 || s.answered != 0 })
				// The Converter's buffer grew to the declared length (and
				// its reservation with it) before it read the body's last
				// MiB: a holder that read size-1 bytes holds 3 MiB and a
				// byte, until its connection closes.
				holds := s.answered == 0
				switch wantHolds := i == 0 || tc.secondHolds; {
				case holds && !wantHolds:
					t.Errorf("%s holds %d bytes of a body beside the first address's: want it refused 429, as it cuts into the API server's room", src, size)
				case !holds && wantHolds:
					t.Errorf("%s, sending a body of %d bytes: answered %d after %d bytes, want its body held", src, size, s.answered, s.read)
				case !holds && s.answered != http.StatusTooManyRequests:
					t.Errorf("%s, cutting into the API server's room: answered %d, want 429", src, s.answered)
				}
			}

			n := maxRequestBytes - 64<<10
			code, err := w.post("api-server", reviewOfSize(n))
			// The webhook's answer, as its handler wrote it: a client that
			// is still writing the body of a review answered 429 and closed
			// can see the reset first (the API server's client retries
			// either).
			s := w.await(t, "api-server", "answered", func(s requestState) bool { return s.answered != 0 })
			switch {
			case err != nil && s.answered == http.StatusTooManyRequests:
				t.Logf("the API server's review, answered 429: %v", err)
			case err != nil:
				t.Fatalf("the API server's review, answered %d: %v", s.answered, err)
			case code != s.answered:
				t.Fatalf("the API server's review was answered %d, and its client got %d", s.answered, code)
			}
			if s.answered != tc.want {
				t.Errorf("the API server's review of %d bytes, while two addresses send 3 MiB each: %d, want %d", n, s.answered, tc.want)
			}
		})
	}
}

// reviewOfSize is a valid ConversionReview of n bytes: one v1alpha1 Bar,
// and whitespace to fill it. The budget counts bytes, whatever they are;
// a Bar with an annotation that filled them made the review's decoding,
// conversion and answer cost the test about a second of CPU under the
// race detector, which a busy machine gave it over minutes.
func reviewOfSize(n int) []byte {
	head := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",`
	tail := `"request":{"uid":"big","desiredAPIVersion":"barcontroller.dev/v1","objects":[` + alphaBar + `]}}`
	return []byte(head + strings.Repeat(" ", n-len(head)-len(tail)) + tail)
}

// Issue 39, sixth review M1: Pods that each keep one request in flight
// and send no byte of its body hold 4 KiB each. Counted as whole
// addresses in an even split of the budget, 27 of them cut every other
// address's part to the 256 KiB floor, and the API server's reviews over
// it were refused 429 for as long as they stalled, at no cost in bytes.
// Counted at what they hold, they leave it a review of 2 MiB. And the
// split still holds between addresses that do hold their parts: two that
// hold 3 MiB each leave a third 1 MiB (TestAPIServerRoom).
func TestAddressesThatHoldNothingTakeNothing(t *testing.T) {
	w := watchWebhook(t, nil)
	var stalled []string
	for i := range 27 {
		id := fmt.Sprintf("stalled-%d", i)
		w.send(t, fmt.Sprintf("127.0.5.%d", i+1), id, maxRequestBytes, 0)
		stalled = append(stalled, id)
	}
	for _, id := range stalled {
		if s := w.await(t, id, "in the Converter or refused", func(s requestState) bool { return s.entered || s.answered != 0 }); !s.entered {
			t.Fatalf("%s, stalled: answered %d, want admitted", id, s.answered)
		}
	}
	code, err := w.post("api-server", reviewOfSize(2<<20))
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK {
		t.Errorf("the API server's review of 2 MiB while 27 addresses stall a request each: %d, want 200", code)
	}
}

// An address's part: an even split of budget - newcomerRoom between it
// and the others that hold more than fairFloor, after what the others
// that hold less take; perAddress at most, fairFloor at least.
func TestShare(t *testing.T) {
	const budget, room = budgetBytes, budgetBytes - newcomerRoom
	repeat := func(n int, v int64) []int64 { return slices.Repeat([]int64{v}, n) }
	for _, tc := range []struct {
		name   string
		others []int64
		want   int64
	}{
		{"alone", nil, addressShare},
		{"27 that hold a first piece each", repeat(27, minReservation), addressShare},
		{"two that hold 3.5 MiB each", repeat(2, room/2), room / 3},
		{"one that holds 1 MiB, one 5 MiB", []int64{1 << 20, 5 << 20}, room / 3},
		{"one 4 MiB and 27 first pieces", append(repeat(27, minReservation), addressShare), (room - 27*minReservation) / 2},
		{"20 at the floor", repeat(20, fairFloor), room - 20*fairFloor},
		{"32 at the floor", repeat(32, fairFloor), fairFloor},
		{"32 just over it", repeat(32, fairFloor+1), fairFloor},
	} {
		b := newBudget(budget, addressShare, nil)
		for i, n := range tc.others {
			b.byAddress[fmt.Sprintf("10.0.0.%d", i+1)] = n
		}
		if got := b.shareLocked("10.0.1.1"); got != tc.want {
			t.Errorf("%s: a newcomer's part %d, want %d", tc.name, got, tc.want)
		}
	}
}
