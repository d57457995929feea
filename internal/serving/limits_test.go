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
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What a caller can make a listener hold before, or instead of, a
// request: headers (MaxHeaderBytes, ReadHeaderTimeout), a body it declares
// and does not send (bodyDeadline). A limit under test fires within
// milliseconds of its time, but on a busy machine (two cores, other
// packages' tests beside these, the race detector) the test's goroutines
// may see it seconds later: so the tests wait up to hangBound, and the
// server's other timeouts, which must not be what ends the wait or cuts
// the request first, are set far past it.

// hangBound is how long a test waits for what takes seconds at most
// before it calls it a hang. It is no measure of the limit under test,
// which is told apart from the server's other timeouts (an hour) instead.
const hangBound = 2 * time.Minute

// withReadHeaderTimeout replaces ReadHeaderTimeout, for the tests of
// another limit: a machine that runs the test seldom can let 3 s pass
// before the server has read the headers already on the connection (or
// completed a TLS handshake), and the connection is closed unanswered
// before the limit under test had its turn.
func withReadHeaderTimeout(d time.Duration) Option {
	return func(s *settings) { s.srv.ReadHeaderTimeout = d }
}

func listenFor(t *testing.T, h http.Handler, opts ...Option) (addr, endpoint string) {
	t.Helper()
	endpoint = "limits-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	a, stop, err := Listen(context.Background(), endpoint, "127.0.0.1:0", h, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return a.String(), endpoint
}

// Connections that each send about 1 MiB of header lines are answered
// 431 once they pass MaxHeaderBytes: with net/http's default (1 MiB) the
// server read and held each header whole, and waited for its end.
func TestLargeHeadersAreRefused(t *testing.T) {
	addr, _ := listenFor(t, http.NotFoundHandler(), withReadHeaderTimeout(time.Hour))
	conns := DefaultConnLimits.PerSource                   // all from one address, within its share
	line := "X-Pad: " + strings.Repeat("a", 1016) + "\r\n" // 1 KiB
	piece := strings.Repeat(line, 64)                      // 64 KiB
	var wg sync.WaitGroup
	codes := make(chan int, conns)
	for range conns {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				codes <- 0
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(hangBound))
			go func() {
				_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n")
				for range 1000 / 64 { // 1000 KiB, under the old limit; never ended
					if _, err := io.WriteString(conn, piece); err != nil {
						return
					}
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				codes <- 0
				return
			}
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a connection sending 1000 KiB of headers was answered %d, want 431", code)
		}
	}
}

// A header that stops coming is dropped after ReadHeaderTimeout, a few
// seconds (it was 10 s), without an answer: with ReadTimeout an hour,
// nothing else drops it within hangBound.
func TestStalledHeaderIsDropped(t *testing.T) {
	if ReadHeaderTimeout > 5*time.Second {
		t.Errorf("ReadHeaderTimeout is %v: a stalled header holds its connection that long", ReadHeaderTimeout)
	}
	addr, _ := listenFor(t, http.NotFoundHandler(), WithReadTimeout(time.Hour))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-Half: "); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	n, err := conn.Read(make([]byte, 1))
	if !errors.Is(err, io.EOF) || n != 0 {
		t.Errorf("a stalled header: read %d bytes, %v; want the connection closed (EOF)", n, err)
	}
}

// A body declared and never sent fails the handler's read after
// BodyGrace, long before the server's ReadTimeout (an hour here), and is
// counted.
func TestStalledBodyIsCutAfterGrace(t *testing.T) {
	readErr := make(chan error, 1)
	addr, endpoint := listenFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		readErr <- err
	}), WithReadTimeout(time.Hour), withReadHeaderTimeout(time.Hour), WithBodies())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the handler's read of a stalled body ended with %v, want a deadline", err)
		}
		if n := listenerCounts(t, endpoint)[`bar_controller_listener_slow_bodies_total{}`]; n != 1 {
			t.Errorf("slow bodies counted: %v, want 1", n)
		}
	case <-time.After(hangBound):
		t.Fatalf("the handler was still waiting for a stalled body after %v", hangBound)
	}
}

// A body the handler does not read does not hold the answer: net/http
// reads up to 256 KiB of it before answering, to reuse the connection,
// and waited for it until ReadTimeout (an hour here).
func TestUnreadBodyDoesNotHoldTheAnswer(t *testing.T) {
	addr, _ := listenFor(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }),
		WithReadTimeout(time.Hour), withReadHeaderTimeout(time.Hour), WithBodies())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %v to a request whose body never came: %v", hangBound, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("answered %d, want 200", resp.StatusCode)
	}
}

// A body sent as fast as the caller can is read whole, and the connection
// serves the next request: the deadlines move with the body and are
// given back when it ends.
func TestBodyAtSpeedIsRead(t *testing.T) {
	got := make(chan int64, 2)
	addr, _ := listenFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got <- n
	}), withReadHeaderTimeout(time.Hour), WithBodies())
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range 2 {
		body := bytes.Repeat([]byte("x"), 4<<20)
		resp, err := client.Post("http://"+addr+"/", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := <-got; n != int64(len(body)) || resp.StatusCode != http.StatusOK {
			t.Errorf("request %d: the handler read %d of %d bytes; %d", i+1, n, len(body), resp.StatusCode)
		}
	}
}

// Over TLS, a client that offers HTTP/2 gets HTTP/1.1: one request per
// connection at a time, so that the connection limits bound requests.
func TestNoHTTP2(t *testing.T) {
	cfg, err := TLSConfig("", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := Listen(context.Background(), "h2", "127.0.0.1:0", http.NotFoundHandler(), cfg, withReadHeaderTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := &http.Client{Timeout: hangBound, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}}} //nolint:gosec // a self-signed test server
	resp, err := client.Get("https://" + addr.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Errorf("served %s, want HTTP/1.1", resp.Proto)
	}
}

// The probes and the metrics endpoint take no body: a request that
// declares one is answered 413 and its connection closed, without waiting
// for the body. Otherwise the connection stays busy while net/http waits
// for a body nobody reads, and busy connections never give way to a new
// one: four addresses of sixteen such connections each, repeated, would
// keep the kubelet's probes out.
func TestBodiesRefusedWhereNoneIsTaken(t *testing.T) {
	addr, _ := listenFor(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }),
		withReadHeaderTimeout(time.Hour))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer to a request whose body never came: %v", err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("answered %d, close %v; want 413 and the connection closed", resp.StatusCode, resp.Close)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// Closed at once, not when the body's deadline ends the wait for it:
	// the bound is the fault's own constant, BodyGrace, after which the
	// server closed the connection before (2.1 s measured); the close
	// itself takes microseconds on loopback.
	_ = conn.SetReadDeadline(time.Now().Add(BodyGrace / 2))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("after the answer: %v, want the server to have closed the connection at once", err)
	}
}
