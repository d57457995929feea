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

package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
)

// MaxHeaderLines bounds the lines of a request's headers. MaxHeaderBytes
// alone bounds their bytes, but net/http keeps each distinct header in a
// map entry of its own, about 100 bytes more than the line: 4,500 lines
// of "ab:" in 20 KiB held 495 KiB of heap per connection, and 256 stalled
// connections took the conversion-only Pod from 27 to 187 MiB (issue 39,
// thirteenth review, C2). The API server, the kubelet and Prometheus send
// ten or so; a request with more is answered 400 and its connection
// closed, before net/http has parsed any of it. One sent before the
// answer to the one before it is parsed uncounted from net/http's buffer
// (4 KiB at most), and answered 400 before any handler (startBody).
const MaxHeaderLines = 64

var (
	errTooManyHeaderLines = fmt.Errorf("more than %d header lines", MaxHeaderLines)
	// errPipelined: the caller sent a request before the answer to the
	// one before it. None of the endpoints' callers do; net/http would
	// have read its first bytes ahead, where no line is counted.
	errPipelined = errors.New("a request sent before the answer to the one before it")
)

// headerListener hands net/http each connection as a headerConn. It sits
// above TLS, where the headers are readable, and so net/http no longer
// sees a *tls.Conn: the handshake is made in the first read, which net/http
// bounds by ReadHeaderTimeout as it bounded its own handshake, and its
// failure logged as net/http logged it. Nothing here reads the request's
// TLS state (http.Request.TLS is nil).
type headerListener struct {
	net.Listener
	logf func(format string, args ...any)
}

func (l headerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headerConn{Conn: c, logf: l.logf, body: -1}, nil
}

// headerConn counts the lines of each request's headers as net/http
// reads them, and refuses the read that brings one too many. Between the
// blank line that ends the headers and the request's answer (markIdle)
// what it reads is the body, whose length the handler tells it
// (startBody): bytes past that are a pipelined request, read ahead
// uncounted, and the next read fails instead.
type headerConn struct {
	net.Conn
	logf func(format string, args ...any)

	// net/http reads from one goroutine at a time, the handler's body
	// reads and its background read included; markIdle and startBody
	// come from the handler's goroutine. The lock is for the race
	// detector's sake, and costs nothing next to a read.
	mu         sync.Mutex
	handshaken bool
	inBody     bool  // past the blank line, until the answer is done
	lines      int   // complete lines of the headers read so far
	lineLen    int   // bytes of the current line, CR left out
	after      int64 // bytes read past the blank line
	body       int64 // the body's declared length; -1 until the handler says
	failed     error
}

// NetConn is the connection under TLS, as the connection limits know it
// (connContext, markIdle).
func (c *headerConn) NetConn() net.Conn {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c.Conn
}

// CloseWrite ends the stream as net/http would with the connection under
// it (a TLS close_notify, or a TCP FIN).
func (c *headerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *headerConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	failed := c.failed
	handshake := !c.handshaken
	c.handshaken = true
	c.mu.Unlock()
	if failed != nil {
		return 0, failed
	}
	if tc, ok := c.Conn.(*tls.Conn); ok && handshake {
		// Under the read deadline net/http has set for the headers.
		if err := tc.HandshakeContext(context.Background()); err != nil {
			c.logf("http: TLS handshake error from %s: %v", c.RemoteAddr(), err)
			return 0, err
		}
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count(p[:n]) {
		c.failed = errTooManyHeaderLines
		return 0, c.failed
	}
	// One byte past the body is the next request's, read by net/http's
	// background read (connReader.backgroundRead, one byte) when the
	// caller sends it as soon as the answer arrives, before net/http has
	// called that read off: no pipelining, and what the API server does
	// on a kept-alive connection. More is a read ahead.
	if c.body >= 0 && c.after > c.body+1 {
		// The bytes are handed on (net/http may serve a pipelined
		// request already read, at most its 4 KiB buffer); the next
		// read fails.
		c.failed = errPipelined
	}
	return n, err
}

// count reads b, the next bytes of the stream, and says whether the
// headers now have more than MaxHeaderLines lines.
func (c *headerConn) count(b []byte) bool {
	if c.inBody {
		c.after += int64(len(b))
		return false
	}
	for i, ch := range b {
		switch {
		case ch == '\n' && c.lineLen == 0 && c.lines > 0:
			c.inBody = true
			c.after = int64(len(b) - i - 1)
			return false
		case ch == '\n':
			c.lines++
			c.lineLen = 0
			if c.lines > MaxHeaderLines {
				return true
			}
		case ch != '\r':
			c.lineLen++
		}
	}
	return false
}

// startBody tells the connection the length of the body of the request in
// the handler (0 for none, -1 for one of unknown length: chunked, which
// bodyDeadline refuses where bodies are taken).
//
// It returns whether this request itself was read ahead: the connection
// had already found a request sent too early, and net/http took this one
// from its buffer (at most 4 KiB) without reading, so without a count.
func (c *headerConn) startBody(declared int64) (pipelined bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == errPipelined {
		return true
	}
	c.body = declared
	if declared >= 0 && c.after > declared && c.failed == nil {
		c.failed = errPipelined
	}
	return false
}

// nextRequest readies the connection for the next request's headers,
// once the answer to the last one is written (markIdle).
func (c *headerConn) nextRequest() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inBody, c.lines, c.lineLen, c.after, c.body = false, 0, 0, 0, -1
}
