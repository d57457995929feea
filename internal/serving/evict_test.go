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
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// listen is Listen with limits, returning the listener's address and its
// connection limits, to wait on.
func listen(t *testing.T, endpoint string, h http.Handler, limits ConnLimits, opts ...Option) (string, *limitListener) {
	t.Helper()
	var ll *limitListener
	listened = func(l *limitListener) { ll = l }
	defer func() { listened = nil }()
	addr, stop, err := Listen(t.Context(), endpoint, "127.0.0.1:0", h, nil, append([]Option{WithConnLimits(limits)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr.String(), ll
}

// waitIdle waits until n connections are idle: net/http marks one idle
// just after it wrote the answer its client may have read already.
func waitIdle(t *testing.T, l *limitListener, n int) {
	t.Helper()
	waitState(t, l, connIdle, n)
}

// waitState waits until n connections are in state.
func waitState(t *testing.T, l *limitListener, state int32, n int) {
	t.Helper()
	for deadline := time.Now().Add(hangBound); ; time.Sleep(time.Millisecond) {
		got := 0
		l.mu.Lock()
		for _, conns := range l.bySource {
			for _, c := range conns {
				if c.state.Load() == state {
					got++
				}
			}
		}
		l.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections in state %d after %v, want %d", got, state, hangBound, n)
		}
	}
}

// expectAnswered reads one answer on each of clients, and fails the test
// for any that is not a 200.
func expectAnswered(t *testing.T, what string, clients []*client) {
	t.Helper()
	for i, c := range clients {
		_ = c.conn.SetDeadline(time.Now().Add(hangBound))
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Errorf("%s %d: %v, want its answer", what, i+1, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s %d: %d", what, i+1, resp.StatusCode)
		}
	}
}

// withBodyGrace replaces BodyGrace, so that a test's bodies wait for as
// long as the test needs them to.
func withBodyGrace(d time.Duration) Option {
	return func(s *settings) { s.bodyGrace = d }
}

// Issue 39, C2: as many sources as the listener takes, each holding one
// idle keep-alive connection, refused every other source: a kubelet's
// probe among them, so every replica's liveness probe failed. An idle
// connection now gives way to a new one, whatever its source.
func TestIdleConnectionsGiveWay(t *testing.T) {
	endpoint := "idle-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	limits := ConnLimits{Total: 8, PerSource: 2}
	a, l := listen(t, endpoint, ok, limits)
	for i := range limits.Total {
		if code := dialFrom(t, fmt.Sprintf("127.0.1.%d", i+1), a).get(); code != http.StatusOK {
			t.Fatalf("source %d of %d: %d", i+1, limits.Total, code)
		}
	}
	waitIdle(t, l, limits.Total)
	const probes = 5
	for i := range probes {
		if code := dialFrom(t, fmt.Sprintf("127.0.2.%d", i+1), a).get(); code != http.StatusOK {
			t.Errorf("a probe from a new source, %d sources holding an idle connection each: %d, want 200", limits.Total, code)
		}
	}
	got := listenerCounts(t, endpoint)
	for name, want := range map[string]float64{
		`bar_controller_listener_connections_refused_total{reason="evicted"}`: probes,
		`bar_controller_listener_connections_refused_total{reason="total"}`:   0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
}

// A connection whose request is in a handler, with no body to wait for,
// is never closed for another: with every slot in flight, a new source is
// refused, and every request in flight is answered. Before, the source
// holding the most lost its oldest connection, request and all (it could
// be the API server's review).
func TestInFlightRequestsAreNotEvicted(t *testing.T) {
	endpoint := "inflight-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	entered, release := make(chan struct{}, 8), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		fmt.Fprint(w, "ok")
	})
	limits := ConnLimits{Total: 4, PerSource: 2}
	a, _ := listen(t, endpoint, h, limits)
	var held []*client
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		for range limits.PerSource {
			c := dialFrom(t, src, a)
			if c.conn == nil {
				t.Fatalf("%s: not connected", src)
			}
			if _, err := io.WriteString(c.conn, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
	}
	for range held {
		select {
		case <-entered:
		case <-time.After(hangBound):
			t.Fatalf("a held request did not reach the handler within %v", hangBound)
		}
	}
	if code := dialFrom(t, "127.0.0.4", a).get(); code != 0 {
		t.Errorf("a new source, every connection in flight: answered %d, want closed", code)
	}
	close(release)
	expectAnswered(t, "held request", held)
	got := listenerCounts(t, endpoint)
	for name, want := range map[string]float64{
		`bar_controller_listener_connections_refused_total{reason="evicted"}`: 0,
		`bar_controller_listener_connections_refused_total{reason="total"}`:   1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
}

// Issue 39, round-2 review, M1: connections whose handlers wait for a body
// the caller trickles stay busy as long as the caller likes, and four Pods
// of 64 such connections kept every slot of the webhook, the API server
// refused. Now such a connection gives way to a newcomer, the one that
// moved least, while its source holds more than the newcomer's and one;
// connections in a handler with no body to wait for never do. Before,
// every newcomer here was refused.
func TestBodyWaitsGiveWay(t *testing.T) {
	endpoint := "bodywait-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	entered, release := make(chan string, 8), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/body":
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return
			}
		case "/hold":
			entered <- r.RemoteAddr
			<-release
		}
		fmt.Fprint(w, "ok")
	})
	limits := ConnLimits{Total: 6, PerSource: 3}
	// The bodies wait until the test sends them or ends, however slowly
	// it runs.
	a, l := listen(t, endpoint, h, limits, WithBodies(), WithReadTimeout(time.Hour), withBodyGrace(time.Hour))
	send := func(c *client, req string) {
		t.Helper()
		if c.conn == nil {
			t.Fatal("not connected")
		}
		if _, err := io.WriteString(c.conn, req); err != nil {
			t.Fatal(err)
		}
	}
	awaitEntered := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(hangBound):
			t.Fatalf("%s did not reach the handler within %v", what, hangBound)
		}
	}
	const declared = "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
	const hold = "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"

	// 127.0.0.2 waits on three bodies; 127.0.0.3 holds three requests with
	// none. The listener is full, nothing idle.
	var waiting, held []*client
	for i := range limits.PerSource {
		c := dialFrom(t, "127.0.0.2", a)
		send(c, declared)
		// Each waits (its headers read, its last move) before the next is
		// dialled: the order of their moves is this one.
		waitState(t, l, connWaiting, i+1)
		waiting = append(waiting, c)
	}
	for range limits.PerSource {
		c := dialFrom(t, "127.0.0.3", a)
		send(c, hold)
		held = append(held, c)
		awaitEntered("127.0.0.3's request")
	}
	// Two newcomers, each holding none: 127.0.0.2 holds 3, then 2, more
	// than one and one, and its oldest waits give way. A newcomer refused
	// sees its connection closed (its first byte, peeked, is an error).
	var peeked []chan error
	for _, src := range []string{"127.0.0.4", "127.0.0.5"} {
		c := dialFrom(t, src, a)
		send(c, hold)
		peek := make(chan error, 1)
		go func() { _, err := c.r.Peek(1); peek <- err }()
		select {
		case <-entered:
		case err := <-peek:
			t.Fatalf("%s's request, the listener full: its connection ended (%v) before it reached the handler; want a wait to give way", src, err)
		case <-time.After(hangBound):
			t.Fatalf("%s's request did not reach the handler within %v", src, hangBound)
		}
		held = append(held, c)
		peeked = append(peeked, peek)
	}
	for i, c := range waiting[:2] {
		_ = c.conn.SetDeadline(time.Now().Add(hangBound))
		if _, err := http.ReadResponse(c.r, nil); err == nil {
			t.Errorf("127.0.0.2's wait %d answered, want its connection closed for a newcomer", i+1)
		}
	}
	// Every source holds one or three, and 127.0.0.3's are in a handler
	// with no body to wait for: nobody gives way to a third newcomer.
	if code := dialFrom(t, "127.0.0.6", a).get(); code != 0 {
		t.Errorf("a newcomer, 127.0.0.2 holding one wait: answered %d, want closed", code)
	}

	// What stayed is served: the last body, and the held requests.
	send(waiting[2], "hello")
	close(release)
	for _, peek := range peeked { // their answers have begun: the reader is the loop's below
		if err := <-peek; err != nil {
			t.Errorf("a newcomer's answer: %v", err)
		}
	}
	expectAnswered(t, "connection that stayed", append([]*client{waiting[2]}, held...))
	got := listenerCounts(t, endpoint)
	for name, want := range map[string]float64{
		`bar_controller_listener_connections_refused_total{reason="evicted"}`: 2,
		`bar_controller_listener_connections_refused_total{reason="total"}`:   1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
}
