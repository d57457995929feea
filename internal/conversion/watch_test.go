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
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// hangBound is how long a test waits for what takes milliseconds on an
// idle machine before it calls it a hang. Nothing asserted depends on it:
// it only has to outlast a machine that seldom runs the test's goroutines
// (two cores, other packages' tests beside it, the race detector, the
// conversion of a 4 MiB review), where 10 s did not.
const hangBound = 5 * time.Minute

// watchedWebhook serves the webhook's handler as serve.go builds it (the
// budget of limit.go in front of the Converter, with the API server's
// addresses the operator named) and records what became of each request,
// by its X-Id header.
//
// It serves it on a plain http.Server, not on serving.Listen: the
// listener's read deadlines cut a body that stops arriving after
// serving.BodyGrace plus its bytes at serving.MinBodyRate (5 s for 3 MiB;
// a body cannot outlast its declared length of at most 4 MiB, however it
// is trickled), and a test that needs bodies held while it makes another
// request then asserts that its goroutines ran within those seconds. On a
// busy machine they did not: the holders' bodies were cut before they
// were read whole, or before the API server's review came. Here a body
// the test stops sending stays held, with what it reserved, until the
// test ends and closes its connection. The listener's deadlines are
// internal/serving's to test (TestStalledBodyIsCutAfterGrace,
// TestBodyAtSpeedIsRead).
type watchedWebhook struct {
	addr string

	mu      sync.Mutex
	reqs    map[string]requestState
	changed chan struct{} // closed and replaced at every change
}

// requestState is what became of one request.
type requestState struct {
	// entered: admitted by the budget, in the Converter.
	entered bool
	// read is the bytes of its body the Converter has read.
	read int64
	// answered is its status code, once the webhook's handler returned
	// (and the budget had its reservation back).
	answered int
}

func watchWebhook(t *testing.T, apiServer []netip.Prefix) *watchedWebhook {
	t.Helper()
	w := &watchedWebhook{reqs: map[string]requestState{}, changed: make(chan struct{})}
	converter := NewConverter()
	inner := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Id")
		w.update(id, func(s *requestState) { s.entered = true })
		r.Body = &watchedBody{ReadCloser: r.Body, read: func(n int) { w.update(id, func(s *requestState) { s.read += int64(n) }) }}
		converter.ServeHTTP(rw, r)
	})
	h := handler(inner, apiServer)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: rw}
		h.ServeHTTP(sw, r)
		if sw.code == 0 {
			sw.code = http.StatusOK // net/http's answer to a handler that wrote none
		}
		w.update(r.Header.Get("X-Id"), func(s *requestState) { s.answered = sw.code })
	}))
	// Registered before the connections of send, so run after they are
	// closed: Close waits for the handlers, which wait for those bodies.
	t.Cleanup(srv.Close)
	w.addr = srv.Listener.Addr().String()
	return w
}

func (w *watchedWebhook) update(id string, f func(*requestState)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.reqs[id]
	f(&s)
	w.reqs[id] = s
	close(w.changed)
	w.changed = make(chan struct{})
}

// state is what became of request id so far.
func (w *watchedWebhook) state(id string) requestState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reqs[id]
}

// await waits until done holds of request id's state, and returns that
// state: progress is what it waits on, not time.
func (w *watchedWebhook) await(t *testing.T, id, what string, done func(requestState) bool) requestState {
	t.Helper()
	hang := time.NewTimer(hangBound)
	defer hang.Stop()
	for {
		w.mu.Lock()
		s, changed := w.reqs[id], w.changed
		w.mu.Unlock()
		if done(s) {
			return s
		}
		select {
		case <-changed:
		case <-hang.C:
			t.Fatalf("%s: not %s after %v, a hang (%+v)", id, what, hangBound, s)
		}
	}
}

// send makes request id from src: headers that declare a body of
// declared bytes, then sent of them, and nothing more until the test
// ends and closes the connection. The webhook holds what it reserved for
// the body until then, unless it refuses it.
func (w *watchedWebhook) send(t *testing.T, src, id string, declared, sent int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	conn, err := d.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		// A refused request's connection is closed under the write
		// (broken pipe, reset): what the webhook did is in its state, not
		// in this error.
		_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Id: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
			Path, id, declared)
		_, _ = conn.Write(bytes.Repeat([]byte(" "), sent))
	}()
}

// post sends body as request id from 127.0.0.1, the API server's address
// in these tests, and returns the status its client got.
func (w *watchedWebhook) post(id string, body []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+w.addr+Path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Id", id)
	resp, err := (&http.Client{Timeout: hangBound}).Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// watchedBody counts the bytes the Converter reads of a body.
type watchedBody struct {
	io.ReadCloser
	read func(n int)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.read(n)
	}
	return n, err
}

// statusWriter remembers the status code the webhook's handler answered.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
