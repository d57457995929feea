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
func listen(t *testing.T, endpoint string, h http.Handler, limits ConnLimits) (string, *limitListener) {
	t.Helper()
	var ll *limitListener
	listened = func(l *limitListener) { ll = l }
	defer func() { listened = nil }()
	addr, stop, err := Listen(t.Context(), endpoint, "127.0.0.1:0", h, nil, WithConnLimits(limits))
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
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // a hang bound
		idle := 0
		l.mu.Lock()
		for _, conns := range l.bySource {
			for _, c := range conns {
				if c.state.Load() == connIdle {
					idle++
				}
			}
		}
		l.mu.Unlock()
		if idle >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections idle after 10 s, want %d", idle, n)
		}
	}
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

// A connection whose request is in a handler is never closed for
// another: with every slot in flight, a new source is refused, and every
// request in flight is answered. Before, the source holding the most lost
// its oldest connection, request and all (it could be the API server's
// review).
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
		case <-time.After(10 * time.Second): // a hang bound
			t.Fatal("a held request did not reach the handler within 10 s")
		}
	}
	if code := dialFrom(t, "127.0.0.4", a).get(); code != 0 {
		t.Errorf("a new source, every connection in flight: answered %d, want closed", code)
	}
	close(release)
	for i, c := range held {
		_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second)) // a hang bound
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Errorf("held request %d: %v, want its answer", i+1, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("held request %d: %d", i+1, resp.StatusCode)
		}
	}
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
