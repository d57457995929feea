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
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// errStopped stands for the listener's read deadline: the body stopped
// arriving.
var errStopped = errors.New("the body stopped arriving")

type stoppedBody struct{}

func (stoppedBody) Read([]byte) (int, error) { return 0, errStopped }

// A body that stops arriving holds what it sent and at most a half
// more (and one step of minReservation), whatever length it declared.
// When the buffer doubled, a caller that sent just over half of a 4 MiB
// body and stopped held all 4 MiB of its claim until the read deadline
// (issue 39, thirteenth review, m1).
func TestStalledBodyHoldsLittleMoreThanItSent(t *testing.T) {
	for _, sent := range []int{0, 1, minReservation + 1, 100_000, 1<<20 + 1, 2<<20 + 1, maxRequestBytes - 1} {
		b := newBudget(4*maxRequestBytes, 2*maxRequestBytes, nil)
		c := &claim{b: b, addr: "127.0.0.2"}
		r := httptest.NewRequest(http.MethodPost, Path, io.MultiReader(bytes.NewReader(make([]byte, sent)), stoppedBody{}))
		r.ContentLength = maxRequestBytes
		r = r.WithContext(context.WithValue(r.Context(), claimKey{}, c))
		if _, err := readBody(httptest.NewRecorder(), r); !errors.Is(err, errStopped) {
			t.Fatalf("sent %d: %v, want the body's own error", sent, err)
		}
		if limit := int64(sent) + int64(sent)/2 + minReservation; c.n > limit {
			t.Errorf("sent %d of %d and stopped: holds %d, more than %d", sent, maxRequestBytes, c.n, limit)
		}
	}
}

// A whole body is read whole, however its length falls against the
// buffer's growth.
func TestReadBodyReadsItWhole(t *testing.T) {
	for _, n := range []int{0, 1, minReservation, minReservation + 1, 5 * minReservation, 1 << 20, maxRequestBytes} {
		want := bytes.Repeat([]byte("x"), n)
		r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(want))
		r.ContentLength = int64(n)
		got, err := readBody(httptest.NewRecorder(), r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("a body of %d bytes: read %d, %v", n, len(got), err)
		}
	}
}
