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
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The budget on a real server: a request over the size limit is refused
// before its body is read, one without a length too; past an address's
// share the answer is 429 with Retry-After, while another address still
// gets through; a finished request gives its bytes back.
func TestLimited(t *testing.T) {
	b := newBudget(4*minReservation, 2*minReservation, nil)
	entered := make(chan struct{})
	hold := make(chan struct{})
	var read atomic.Int64
	h := limited(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		read.Add(n)
		if r.Header.Get("Hold") != "" {
			entered <- struct{}{}
			<-hold
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(body io.Reader, size int64, hold bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+Path, body)
		req.ContentLength = size
		if hold {
			req.Header.Set("Hold", "1")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	big := bytes.Repeat([]byte("x"), maxRequestBytes+1)
	if resp := post(bytes.NewReader(big), int64(len(big)), false); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d, want 413", resp.StatusCode)
	}
	if resp := post(io.MultiReader(strings.NewReader("{}")), -1, false); resp.StatusCode != http.StatusLengthRequired {
		t.Errorf("a body without a length: %d, want 411", resp.StatusCode)
	}
	if n := read.Load(); n != 0 {
		t.Errorf("the handler read %d bytes of refused requests", n)
	}

	// Two requests from this address take its share and stay in flight.
	done := make(chan *http.Response, 2)
	for range 2 {
		go func() { done <- post(strings.NewReader("{}"), 2, true) }()
		<-entered
	}
	resp := post(strings.NewReader("{}"), 2, false)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("past the address's share: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Another address finds the rest of the budget.
	if !b.reserve("10.0.0.9", 2*minReservation) {
		t.Error("another address found no room in the budget")
	}
	b.release("10.0.0.9", 2*minReservation)
	close(hold)
	for range 2 {
		if r := <-done; r.StatusCode != http.StatusOK {
			t.Errorf("a held request: %d", r.StatusCode)
		}
	}
	if resp := post(strings.NewReader("{}"), 2, false); resp.StatusCode != http.StatusOK {
		t.Errorf("after the held requests ended: %d, want 200", resp.StatusCode)
	}
	if b.reserved != 0 || len(b.byAddress) != 0 {
		t.Errorf("budget after every request ended: %d bytes, %v", b.reserved, b.byAddress)
	}
}

// The Converter alone (no budget in front) still refuses a body over the
// limit with 413 and says why, rather than a cut body's decoding error.
func TestConverterRefusesOversizeBody(t *testing.T) {
	body := `{"request":{"uid":"x","objects":[{"a":"` + strings.Repeat("x", maxRequestBytes) + `"}]}}`
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	NewConverter().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "over the webhook's limit") {
		t.Errorf("%d %q, want 413 naming the limit", rec.Code, rec.Body.String())
	}
}

// A request's claim grows with the bytes that arrive, not with the length
// it declares: a body that arrives whole within the address's share is
// read; one whose bytes would take the address past its share is refused
// 429 as they come, with Retry-After, and everything it reserved is given
// back.
func TestClaimGrowsWithTheBody(t *testing.T) {
	share := int64(256 << 10)
	b := newBudget(4*share, share, nil)
	got := make(chan int, 1)
	srv := httptest.NewServer(limited(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if errors.Is(err, errBusy) {
			refuseBusy(w)
			got <- -1
			return
		}
		got <- len(body)
	})))
	defer srv.Close()
	post := func(n int) *http.Response {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL+Path, "application/json", bytes.NewReader(bytes.Repeat([]byte("x"), n)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := post(200 << 10); resp.StatusCode != http.StatusOK || <-got != 200<<10 {
		t.Errorf("a body within the share: %d", resp.StatusCode)
	}
	// Its buffer doubles from 4 KiB: 512 KiB for 300 KiB, past the share.
	if resp := post(300 << 10); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || <-got != -1 {
		t.Errorf("a body past the share: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if b.reserved != 0 || len(b.byAddress) != 0 {
		t.Errorf("budget after every request ended: %d bytes, %v", b.reserved, b.byAddress)
	}
}

// A refused request's connection ends with the answer, without waiting
// for the body the webhook leaves unread: net/http would otherwise read on
// for up to 256 KiB of it, here on a server with no read deadline for as
// long as the caller likes, holding a place of the listener.
func TestRefusalsEndTheBodyWait(t *testing.T) {
	srv := httptest.NewServer(limited(newBudget(budgetBytes, addressShare, nil), http.NotFoundHandler()))
	defer srv.Close()
	for _, req := range []string{
		"GET " + Path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n",              // 405
		"POST " + Path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{", // 411
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		// The connection ends within half a second of the answer
		// (net/http's wait before it closes a connection with unread
		// bytes); 30 s is far past that, and short of the minutes the
		// test would otherwise wait.
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		// The answer's body, then the connection's end (EOF or a reset),
		// not the test's hang bound.
		_, err = io.Copy(io.Discard, resp.Body)
		if err == nil {
			_, err = conn.Read(make([]byte, 1))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%q: answered %d, and the connection stayed open for the body's rest", req, resp.StatusCode)
		}
	}
}
