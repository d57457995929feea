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
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// A body must keep arriving once its headers have: BodyGrace for its first
// bytes, and then at least MinBodyRate on average, or the connection's
// read deadline passes and the read fails. Without it, a request that
// declares a body and sends none of it holds its connection, its
// goroutine and whatever its handler reserved for it until ReadTimeout
// (10 s on the webhook, 30 s elsewhere); with it, about BodyGrace.
//
// The only bodies these endpoints take are the API server's
// ConversionReviews (at most 4 MiB, internal/conversion), sent in one write
// right after their headers over a network that carries tens of MB/s or
// more; metrics and probe requests have none. 2 s covers a retransmitted
// first segment (TCP's initial retransmission timeout is 1 s) and 1 MiB/s
// is a small fraction of any Pod network. Held against a sender, the
// deadline means that keeping n bytes of a body in a replica's memory
// costs sending them again every BodyGrace + n/MinBodyRate (6 s for the
// largest review): bandwidth, not a few stalled connections.
const (
	BodyGrace   = 2 * time.Second
	MinBodyRate = 1 << 20 // bytes per second
)

// bodyDeadline moves the connection's read deadline along with a
// request's body: before each read, to BodyGrace + received/MinBodyRate
// after the handler started, and never past the server's ReadTimeout
// counted from there. It applies to a body the handler never reads too:
// net/http reads up to 256 KiB of one after the handler (to reuse the
// connection) under the deadline set here, rather than for ReadTimeout.
//
// While the handler waits for the body, its connection may give way to a
// newcomer at Total (limitListener): the caller, not the handler, decides
// how long that wait lasts.
func bodyDeadline(endpoint string, readTimeout, grace time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		markServed(r.Context())
		if startBody(r.Context(), r.ContentLength) {
			w.Header().Set("Connection", "close")
			http.Error(w, "Bad Request: a request sent before the answer to the one before it", http.StatusBadRequest)
			return
		}
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		b := &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), endpoint: endpoint, start: start,
			grace: grace, declared: r.ContentLength, conn: awaitBody(r.Context())}
		if readTimeout > 0 {
			b.limit = start.Add(readTimeout)
		}
		b.pace()
		r.Body = b
		h.ServeHTTP(w, r)
	})
}

type pacedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	endpoint string
	start    time.Time
	grace    time.Duration
	limit    time.Time // zero: none
	declared int64     // the Content-Length; -1: none
	received int64
	done     bool
	conn     *limitedConn // nil: not a limited listener's
}

// pace sets the deadline for the next bytes.
func (b *pacedBody) pace() {
	d := b.start.Add(b.grace + time.Duration(float64(b.received)/MinBodyRate*float64(time.Second)))
	if !b.limit.IsZero() && d.After(b.limit) {
		d = b.limit
	}
	_ = b.rc.SetReadDeadline(d)
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	n, err := b.ReadCloser.Read(p)
	b.received += int64(n)
	if b.declared >= 0 && b.received >= b.declared {
		// All in, though the reader may say so (EOF) only at the next
		// read, which a handler that knows the length need not make.
		b.conn.bodyDone()
	}
	switch {
	case err == nil:
		b.pace()
	case errors.Is(err, io.EOF):
		// The whole body is in. net/http now reads ahead for the next
		// request on the connection; give that read the server's own
		// bound back, not what is left of the body's, which a long
		// handler would outlive (the read's failure would cancel the
		// request's context).
		b.done = true
		b.conn.bodyDone()
		_ = b.rc.SetReadDeadline(b.limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		metrics.RecordSlowBody(b.endpoint)
	}
	return n, err
}

// requireLength answers 411, and closes the connection, for a request whose
// body has no declared length (chunked): the API server declares its
// reviews', and without it the header count cannot tell where the body
// ends and a pipelined request begins (headerConn).
func requireLength(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength < 0 {
			w.Header().Set("Connection", "close")
			http.Error(w, "Length Required: a body must declare its length", http.StatusLengthRequired)
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			return
		}
		h.ServeHTTP(w, r)
	})
}
