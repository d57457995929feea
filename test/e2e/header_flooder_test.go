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
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// What one hostile Pod can do to a listener before any handler runs:
// open connections, send headers slowly, declare a body and send none of
// it. A headerFlood is many such connections ("slots"), each dialled again
// after the listener ends it, from several source addresses, until its
// window ends: bounded in connections at once (slots), in dials
// (maxDialsPerSlot each) and in time (the window).
type headerFlood struct {
	// target is host:port; path the request's path; useTLS whether the
	// listener is HTTPS (the flooder trusts any certificate: any Pod can
	// call).
	target, method, path string
	useTLS               bool
	// sources are the addresses the slots dial from, in turn.
	sources []net.IP
	// bodyBytes is the Content-Length every request declares, after its
	// headers; none of it is ever sent.
	bodyBytes int
	// slots is how many connections the flood holds at once.
	slots int
	// prompt floods as round-2 review's M1 did: every connection sends a
	// small header, so that its request reaches the handler at once and
	// waits there for its body, and its slot dials again promptRedial after
	// its connection ends, up to promptDialsPerSlot times: a slot refused
	// at once tries again at once, where the others pause for a second.
	prompt bool

	dials, refused, headersSent, answered atomic.Int64
	mu                                    sync.Mutex
	codes                                 map[string]int // the status lines the listener answered with
}

// The flood's shape. A big header is about 1 MiB, under net/http's
// default limit (1 MiB and 4 KiB of slack): a server with that limit reads
// it all and holds it. It is sent in pieces, so that it takes most of the
// 10 s a server with the old ReadHeaderTimeout waited for headers.
const (
	headerLine      = 1024                   // bytes of one padding header line, CRLF included
	bigHeaderLines  = 1020                   // about 1 MiB of header lines
	headerPieces    = 16                     // written in this many writes ...
	headerPiecePace = 400 * time.Millisecond // ... this far apart: 6.4 s for the whole header
	// maxDialsPerSlot bounds the flood's dials whatever the listener does
	// (a listener that refuses at once must not make the flooder spin).
	maxDialsPerSlot = 8
	// redialPause is how long a slot waits after its connection ended
	// before it dials again.
	redialPause = time.Second
	// promptRedial and promptDialsPerSlot are the same for a prompt
	// flood: enough dials for a slot refused every time to keep trying
	// for the whole window (10 s), and no more.
	promptRedial       = 50 * time.Millisecond
	promptDialsPerSlot = 200
)

// run starts the flood's slots and returns when every one has ended: at
// the end of window at the latest (each closes its connection then).
func (f *headerFlood) run(ctx context.Context, window time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	f.codes = map[string]int{}
	dials, pause := maxDialsPerSlot, redialPause
	if f.prompt {
		dials, pause = promptDialsPerSlot, promptRedial
	}
	var wg sync.WaitGroup
	for i := range f.slots {
		src := f.sources[i%len(f.sources)]
		wg.Go(func() {
			for dial := range dials {
				// Every slot starts with a big header, all at once; then
				// every other connection sends a small one, so that its
				// stalled body reaches the handler, where a server whose
				// limits are only on headers holds it by its declared
				// length. A prompt flood sends only small ones.
				f.once(ctx, src, !f.prompt && dial%2 == 0)
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
			}
		})
	}
	wg.Wait()
}

// once is one connection: dial, send the header (big or small) slowly,
// declare a body, send none, and read until the listener ends the
// connection or the window ends.
func (f *headerFlood) once(ctx context.Context, src net.IP, big bool) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 2 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", f.target)
	if err != nil {
		return
	}
	f.dials.Add(1)
	// The window's end ends every connection, whatever it is blocked on.
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	defer raw.Close()
	var conn net.Conn = raw
	if f.useTLS {
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // any Pod can call; it checks nothing
		if err := tc.HandshakeContext(ctx); err != nil {
			// Closed before or during the handshake: refused.
			f.refused.Add(1)
			return
		}
		conn = tc
	}
	// The answer, if any, is read while the header is still being sent: a
	// server with a header limit answers 431 mid-header.
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		buf := make([]byte, 512)
		n, _ := io.ReadAtLeast(conn, buf, 12)
		if n >= 12 {
			f.answered.Add(1)
			f.mu.Lock()
			f.codes[strings.TrimSpace(string(buf[9:12]))]++
			f.mu.Unlock()
		}
		// Drain until the server closes, so a close is seen as one.
		_, _ = io.Copy(io.Discard, conn)
	}()
	if err := f.send(ctx, conn, big, answered); err != nil {
		<-answered
		return
	}
	f.headersSent.Add(1)
	<-answered
}

// send writes the request line, the header and the declared length, and
// stops early if the server answered (closed) first.
func (f *headerFlood) send(ctx context.Context, conn net.Conn, big bool, answered <-chan struct{}) error {
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\n", f.method, f.path); err != nil {
		return err
	}
	if big {
		line := strings.Repeat("a", headerLine-len("X-Pad-0000: \r\n"))
		per := bigHeaderLines / headerPieces
		var piece strings.Builder
		for p := range headerPieces {
			piece.Reset()
			for i := range per {
				fmt.Fprintf(&piece, "X-Pad-%04d: %s\r\n", p*per+i, line)
			}
			if _, err := io.WriteString(conn, piece.String()); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-answered:
				return io.EOF
			case <-time.After(headerPiecePace):
			}
		}
	}
	_, err := fmt.Fprintf(conn, "Content-Length: %d\r\n\r\n", f.bodyBytes)
	return err
}

// summary says what the flood did, for the log.
func (f *headerFlood) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("%d connections, %d refused before a request, %d headers sent whole, %d answered (status: count %v)",
		f.dials.Load(), f.refused.Load(), f.headersSent.Load(), f.answered.Load(), f.codes)
}
