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
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// client is one keep-alive connection from a source address.
type client struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialFrom(t *testing.T, src, addr string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		// Reset while connecting: the listener refused it as it came.
		t.Logf("dialling from %s: %v", src, err)
		return &client{}
	}
	t.Cleanup(func() { conn.Close() })
	return &client{conn: conn, r: bufio.NewReader(conn)}
}

// get sends one request on the connection and returns its status code,
// or 0 if the connection was closed instead: once it answered, the server
// has accepted the connection and counts it.
func (c *client) get() int {
	if c.conn == nil {
		return 0
	}
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second)) // a hang bound: answers take microseconds
	if _, err := io.WriteString(c.conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// listenerCounts scrapes this process's listener metrics for endpoint.
func listenerCounts(t *testing.T, endpoint string) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(metrics.NewRegistry(), false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := map[string]float64{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "bar_controller_listener_") || !strings.Contains(name, `endpoint="`+endpoint+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatal(err)
		}
		name = strings.Replace(name, `endpoint="`+endpoint+`",`, "", 1)
		out[strings.Replace(name, `{endpoint="`+endpoint+`"}`, "{}", 1)] = v
	}
	return out
}

// On a real listener: past its share a source's connection is refused;
// when the listener is full, a new connection takes the idle one that
// moved least, whatever its source holds; each closing is counted by
// reason, and the connections open are a gauge.
func TestConnLimits(t *testing.T) {
	endpoint := "conns-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	a, l := listen(t, endpoint, ok, ConnLimits{Total: 4, PerSource: 3})

	var flood []*client
	for i := range 3 {
		c := dialFrom(t, "127.0.0.2", a)
		if code := c.get(); code != http.StatusOK {
			t.Fatalf("connection %d of 127.0.0.2, within its share: %d", i+1, code)
		}
		// Idle once the server's write of the answer returned, and its
		// progress with it: the order of the connections' last moves is
		// the order of these requests, however the server's goroutines
		// were scheduled after the client read.
		waitIdle(t, l, i+1)
		flood = append(flood, c)
	}
	if code := dialFrom(t, "127.0.0.2", a).get(); code != 0 {
		t.Errorf("a fourth connection of 127.0.0.2, past its share of 3: answered %d, want closed", code)
	}
	other := dialFrom(t, "127.0.0.3", a)
	if code := other.get(); code != http.StatusOK {
		t.Fatalf("127.0.0.3's first connection: %d", code)
	}
	// The listener is full (4), all idle. 127.0.0.3 holds 1, 127.0.0.2
	// holds 3: 127.0.0.2's oldest gives way.
	waitIdle(t, l, 4)
	if code := dialFrom(t, "127.0.0.3", a).get(); code != http.StatusOK {
		t.Fatalf("127.0.0.3's second connection, the listener full: %d, want 200 (an eviction)", code)
	}
	if code := flood[0].get(); code != 0 {
		t.Errorf("127.0.0.2's oldest connection answered %d after the eviction, want closed", code)
	}
	// 2 and 2, all idle. An idle connection gives way whatever its
	// source holds: the one that moved least, 127.0.0.2's older.
	waitIdle(t, l, 4)
	if code := dialFrom(t, "127.0.0.3", a).get(); code != http.StatusOK {
		t.Errorf("127.0.0.3's third connection, 2 and 2 idle: %d, want 200 (an eviction)", code)
	}
	if code := flood[1].get(); code != 0 {
		t.Errorf("127.0.0.2's older connection answered %d after the second eviction, want closed", code)
	}
	// 127.0.0.2's last moves (a request): now 127.0.0.3's first moved
	// least, and gives way to a newcomer.
	if code := flood[2].get(); code != http.StatusOK {
		t.Errorf("127.0.0.2's last connection: %d, want still open", code)
	}
	waitIdle(t, l, 4)
	if code := dialFrom(t, "127.0.0.4", a).get(); code != http.StatusOK {
		t.Errorf("127.0.0.4's connection: %d, want 200 (an eviction)", code)
	}
	if code := other.get(); code != 0 {
		t.Errorf("127.0.0.3's first connection answered %d, want closed: it moved least", code)
	}
	if code := flood[2].get(); code != http.StatusOK {
		t.Errorf("127.0.0.2's last connection: %d, want still open: it moved since", code)
	}

	got := listenerCounts(t, endpoint)
	for name, want := range map[string]float64{
		`bar_controller_listener_connections_refused_total{reason="per_source"}`: 1,
		`bar_controller_listener_connections_refused_total{reason="evicted"}`:    3,
		`bar_controller_listener_connections_refused_total{reason="total"}`:      0,
		`bar_controller_listener_connections{}`:                                  4,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
}

// A connection that never gets a request to a handler is counted as
// unserved when it ends; one that did is not.
func TestUnservedConnectionsAreCounted(t *testing.T) {
	endpoint := "unserved-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	addr, stop, err := Listen(context.Background(), endpoint, "127.0.0.1:0", ok, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	served := dialFrom(t, "127.0.0.1", addr.String())
	if code := served.get(); code != http.StatusOK {
		t.Fatal(code)
	}
	served.conn.Close()
	// A header over MaxHeaderBytes: answered 431 by net/http, no handler.
	big := dialFrom(t, "127.0.0.1", addr.String())
	if big.conn == nil {
		t.Fatal("no connection")
	}
	fmt.Fprintf(big.conn, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2*MaxHeaderBytes))
	if resp, err := http.ReadResponse(big.r, nil); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header of %d bytes: %v %v, want 431", 2*MaxHeaderBytes, resp, err)
	}
	// Both connections end (net/http holds one it answered 431 for half a
	// second); then the count is final. 10 s: a hang bound.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if listenerCounts(t, endpoint)[`bar_controller_listener_connections{}`] == 0 || time.Now().After(deadline) {
			// Scraped again: a scrape collects its metrics side by side,
			// so the one that saw the gauge drop may have read the
			// counter just before it was counted.
			got := listenerCounts(t, endpoint)
			if n := got[`bar_controller_listener_connections_unserved_total{}`]; n != 1 {
				t.Errorf("unserved connections: %v, want 1 (%v)", n, got)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// What one connection can make the server hold before any handler runs,
// at worst: over TLS, a header just under MaxHeaderBytes, never ended.
// The connection limits are sized by it (internal/conversion's
// connLimits). Measured with the clients' side of the connections in the
// same heap, so an upper bound: about 60 KiB per connection.
func TestConnectionMemory(t *testing.T) {
	// One long line, and as many distinct short ones as fit: net/http
	// keeps a map entry for each, about 100 bytes more than the line,
	// and 4,500 of them held 495 KiB a connection until the lines were
	// counted (issue 39, thirteenth review, C2).
	var short strings.Builder
	for i := 0; short.Len() < MaxHeaderBytes-64; i++ {
		fmt.Fprintf(&short, "%x:\r\n", i)
	}
	for _, tc := range []struct {
		name, header string
		held         bool // the server holds it (else it closes the connection)
	}{
		{"one long line", "X-Pad: " + strings.Repeat("a", MaxHeaderBytes-64) + "\r\n", true},
		{"short lines", short.String(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header := "GET / HTTP/1.1\r\nHost: x\r\n" + tc.header
			// A header held is in the heap: less means the samples ended
			// before the server had read it, and measured nothing.
			if per := connectionMemory(t, header, tc.held); tc.held && per < uint64(len(header)) {
				t.Errorf("%d bytes per connection held, less than the header's %d: the measurement missed it", per, len(header))
			}
		})
	}
}

// connectionMemory measures the heap that connections from four
// addresses hold, each having sent header and stalled, and returns it
// per connection.
func connectionMemory(t *testing.T, header string, held bool) uint64 {
	cfg, err := TLSConfig("", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	// ReadHeaderTimeout an hour: the server holds the headers until the
	// test ends. With 3 s, a machine that ran the test seldom let a
	// handshake or a header outlast it, and the dial or the sampling
	// failed.
	addr, stop, err := Listen(context.Background(), "memory", "127.0.0.1:0", http.NotFoundHandler(), cfg,
		WithConnLimits(ConnLimits{Total: n, PerSource: n}), withReadHeaderTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse
	}
	before := live()
	for i := range n {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%4))}, Timeout: hangBound}
		conn, err := tls.DialWithDialer(d, "tcp", addr.String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a self-signed test server
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// A write may fail: the server closes a connection whose header
		// it refuses (MaxHeaderLines), which is what is measured.
		_, _ = io.WriteString(conn, header)
	}
	// The server reads the headers as they come: the heap grows until it
	// has read them all (or closed the connections), then stays: ten
	// samples in a row without growth, once it grew at all if it holds
	// them.
	var grown uint64
	for still, deadline := 0, time.Now().Add(hangBound); still < 10 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var g uint64
		if l := live(); l > before { // less: what earlier tests left was collected meanwhile
			g = l - before
		}
		switch {
		case g > grown:
			still = 0
		case grown > 0 || !held:
			still++
		}
		grown = max(grown, g)
	}
	per := grown / n
	t.Logf("%d KiB per connection holding a header of %d bytes over TLS (server and client)", per>>10, len(header))
	if per > 96<<10 {
		t.Errorf("a connection holds %d KiB before any handler runs, want at most 96 KiB (what the limits are sized by)", per>>10)
	}
	return per
}

// An address the operator names (the API server's) is not held to
// PerSource, is never the one to give way, and takes a connection of
// another source when the listener is full.
func TestConnLimitsTrusted(t *testing.T) {
	endpoint := "trusted-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	limits := ConnLimits{Total: 4, PerSource: 2, Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	addr, stop, err := Listen(context.Background(), endpoint, "127.0.0.1:0", ok, nil, WithConnLimits(limits))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a := addr.String()
	var apiServer []*client
	for i := range 3 {
		c := dialFrom(t, "127.0.0.1", a)
		if code := c.get(); code != http.StatusOK {
			t.Fatalf("the trusted address's connection %d, past PerSource 2: %d, want 200", i+1, code)
		}
		apiServer = append(apiServer, c)
	}
	flood := dialFrom(t, "127.0.0.2", a)
	if code := flood.get(); code != http.StatusOK {
		t.Fatalf("127.0.0.2's first connection: %d", code)
	}
	// Full (4): the trusted address takes 127.0.0.2's, though it holds
	// more than 127.0.0.2 does.
	if code := dialFrom(t, "127.0.0.1", a).get(); code != http.StatusOK {
		t.Fatalf("the trusted address's fourth connection, the listener full: %d, want 200", code)
	}
	if code := flood.get(); code != 0 {
		t.Errorf("127.0.0.2's connection answered %d after the trusted address needed it, want closed", code)
	}
	// Only trusted connections are open: nobody gives way to 127.0.0.2.
	if code := dialFrom(t, "127.0.0.2", a).get(); code != 0 {
		t.Errorf("127.0.0.2's connection, the listener full of trusted ones: answered %d, want closed", code)
	}
	for i, c := range apiServer {
		if code := c.get(); code != http.StatusOK {
			t.Errorf("the trusted address's connection %d: %d, want still open", i+1, code)
		}
	}
}
