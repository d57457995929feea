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

package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// flooder sends the webhook requests written byte by byte on connections
// of their own, from the address src, and counts how each was answered.
type flooder struct {
	addr string
	src  net.IP

	// mu guards codes, which flooders from several addresses may share:
	// those share mu too.
	mu    *sync.Mutex
	codes map[string]map[int]int // kind -> status code (0: none) -> requests
}

// answerBound is how long a flood request waits for its answer: a hang
// bound, twice the webhook's body timeout (internal/conversion, 10 s)
// and more. A webhook without one never answers a slow body.
const answerBound = 40 * time.Second

// post sends one request of kind with the declared Content-Length (none,
// chunked, if chunked) and counts its answer's status code. body writes
// the body until it is done or the connection fails.
func (f *flooder) post(kind string, contentLength int64, chunked bool, body func(io.Writer) error) {
	code := 0
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.codes[kind] == nil {
			f.codes[kind] = map[int]int{}
		}
		f.codes[kind][code]++
	}()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: f.src}, Timeout: 5 * time.Second}
	// The flooder does not check the certificate: any Pod can call.
	conn, err := tls.DialWithDialer(d, "tcp", f.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // see above
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(answerBound))
	header := "POST /convert HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
	if chunked {
		header += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		header += fmt.Sprintf("Content-Length: %d\r\n\r\n", contentLength)
	}
	if _, err := io.WriteString(conn, header); err != nil {
		return
	}
	// The body goes on being written while the answer is read: the
	// webhook may answer before reading it, or never.
	go func() {
		var w io.Writer = conn
		if chunked {
			cw := &chunkWriter{w: conn}
			w = cw
		}
		_ = body(w)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	code = resp.StatusCode
}

// result is the answers counted so far.
func (f *flooder) result() map[string]map[int]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.codes
}

// slowBody sends a few bytes of a review, then a byte every half second
// until the connection fails, or for as long as the answer bound.
func (f *flooder) slowBody(w io.Writer) error {
	if _, err := io.WriteString(w, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"slow",`); err != nil {
		return err
	}
	for range int(answerBound / (500 * time.Millisecond)) {
		time.Sleep(500 * time.Millisecond)
		if _, err := io.WriteString(w, " "); err != nil {
			return err
		}
	}
	return nil
}

// oversizeBody writes a valid ConversionReview of n bytes: one v1alpha1
// Bar whose annotation fills it, as a hostile Pod would send to make the
// webhook hold and convert it.
func (f *flooder) oversizeBody(n int) func(io.Writer) error {
	head := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"big",` +
		`"desiredAPIVersion":"barcontroller.dev/v1","objects":[{"apiVersion":"barcontroller.dev/v1alpha1","kind":"Bar",` +
		`"metadata":{"name":"big","namespace":"default","annotations":{"big":"`
	tail := `"}},"spec":{"deploymentName":"big","image":"nginx"}}]}}`
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		chunk := strings.Repeat("x", 64<<10)
		for left := n - len(head) - len(tail); left > 0; left -= len(chunk) {
			if _, err := io.WriteString(w, chunk[:min(left, len(chunk))]); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, tail)
		return err
	}
}

// chunkWriter writes HTTP/1.1 chunks; it never writes the last one, as
// the bodies it carries are refused before they end.
type chunkWriter struct{ w io.Writer }

func (c *chunkWriter) Write(p []byte) (int, error) {
	if _, err := fmt.Fprintf(c.w, "%x\r\n", len(p)); err != nil {
		return 0, err
	}
	if _, err := c.w.Write(p); err != nil {
		return 0, err
	}
	_, err := io.WriteString(c.w, "\r\n")
	return len(p), err
}
