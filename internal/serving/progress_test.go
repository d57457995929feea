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

// fakeConns builds a listener's books without sockets: connections added
// in the order of their last progress, so the order is the test's.
type fakeConns struct{ l *limitListener }

func newFakeConns(limits ConnLimits) fakeConns {
	return fakeConns{newLimitListener(nil, "fake", limits)}
}

func (f fakeConns) add(src string, state int32, n int) []*limitedConn {
	var out []*limitedConn
	for range n {
		f.l.seq++
		c := &limitedConn{l: f.l, source: src, seq: f.l.seq}
		c.state.Store(state)
		c.moved()
		f.l.bySource[src] = append(f.l.bySource[src], c)
		f.l.open++
		out = append(out, c)
	}
	return out
}

// who names a connection in a failure: its source and admission.
func who(c *limitedConn) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s#%d", c.source, c.seq)
}

func (f fakeConns) victim(mine int) *limitedConn {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	return f.l.victimLocked(false, mine)
}

// What gives way is the connection whose caller moved least recently,
// of those that may: idle ones, and waits of a source holding more than
// the newcomer's and one.
func TestLeastRecentProgressGivesWay(t *testing.T) {
	// Issue 39, fifth review, C1: four sources hold every place but one
	// waiting for bodies they trickle; the API server was just answered
	// on the last. A source that dials and drops (holding none) takes the
	// wait that moved least, never the API server's connection.
	f := newFakeConns(ConnLimits{Total: 257, PerSource: 64})
	var first *limitedConn
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		if w := f.add(src, connWaiting, 64); first == nil {
			first = w[0]
		}
	}
	apiServer := f.add("127.0.0.1", connIdle, 1)[0]
	if v := f.victim(0); v != first {
		t.Errorf("four sources waiting on bodies, the API server just answered: %s gave way, want the wait that moved least (%s); the API server's is %s", who(v), who(first), who(apiServer))
	}

	// Sixth review, M2: the API server holds the most, 20 reviews whose
	// bodies arrive; 16 Pods hold 14 idle connections each, which moved
	// before. A newcomer holding none takes an idle one of theirs, and so
	// does the API server's own newcomer, though it holds the most.
	f = newFakeConns(ConnLimits{Total: 244, PerSource: 64})
	var idle []*limitedConn
	for i := range 16 {
		idle = append(idle, f.add(fmt.Sprintf("127.0.1.%d", i+1), connIdle, 14)...)
	}
	f.add("127.0.0.1", connWaiting, 20)
	if v := f.victim(0); v != idle[0] {
		t.Errorf("a Pod's newcomer: %s gave way, want the idle connection that moved least (%s)", who(v), who(idle[0]))
	}
	if v := f.victim(20); v != idle[1] {
		t.Errorf("the API server's newcomer, holding the most: %s gave way, want the next idle one (%s)", who(v), who(idle[1]))
	}

	// A wait is cut only for a newcomer of a source holding fewer than it
	// and one: the one wait of a source of one stays, though it moved
	// least, and the idle connection gives way.
	f = newFakeConns(ConnLimits{Total: 2, PerSource: 2})
	f.add("127.0.2.1", connWaiting, 1)
	idleOne := f.add("127.0.2.2", connIdle, 1)[0]
	if v := f.victim(0); v != idleOne {
		t.Errorf("gave way: %s, want the idle connection, not the wait of a source of one", who(v))
	}
	// A connection in a handler waiting on nobody never gives way.
	f = newFakeConns(ConnLimits{Total: 1, PerSource: 1})
	f.add("127.0.2.3", connBusy, 1)
	if v := f.victim(0); v != nil {
		t.Errorf("gave way: %s, want none (in a handler)", who(v))
	}
}

// The sixth review's M2 on a real listener: the API server, four reviews
// in flight whose bodies still arrive, holds the most; eight Pods hold
// an idle keep-alive each, the listener full. Three Pods' newcomers each
// take an idle connection, and the API server's reviews are all answered;
// its own newcomer gets a place too. Before, the source holding the most
// gave way first: three of its four reviews were cut while the idle
// connections stayed, and its newcomer was refused.
func TestMovingConnectionsStay(t *testing.T) {
	endpoint := "moving-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		fmt.Fprint(w, "ok")
	})
	limits := ConnLimits{Total: 12, PerSource: 8}
	// Bodies wait as long as the test needs, however slowly it runs.
	a, l := listen(t, endpoint, h, limits, WithBodies(), WithReadTimeout(time.Hour), withBodyGrace(time.Hour))
	write := func(c *client, s string) {
		t.Helper()
		if c.conn == nil {
			t.Fatal("not connected")
		}
		if _, err := io.WriteString(c.conn, s); err != nil {
			t.Fatal(err)
		}
	}
	var reviews []*client
	for range 4 {
		c := dialFrom(t, "127.0.3.1", a)
		write(c, "POST /convert HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
		reviews = append(reviews, c)
	}
	waitState(t, l, connWaiting, 4)
	for i := range 8 {
		if code := dialFrom(t, fmt.Sprintf("127.0.1.%d", i+1), a).get(); code != http.StatusOK {
			t.Fatalf("Pod %d: %d", i+1, code)
		}
	}
	waitIdle(t, l, 8)
	// The reviews' bodies go on arriving: a byte each, read by the server
	// after every idle connection's last move.
	for _, c := range reviews {
		write(c, "w")
	}
	waitMovedAfterIdle(t, l, "127.0.3.1")

	for i := range 3 {
		if code := dialFrom(t, fmt.Sprintf("127.0.2.%d", i+1), a).get(); code != http.StatusOK {
			t.Errorf("a Pod's newcomer %d: %d, want an idle connection to give way", i+1, code)
		}
	}
	for _, c := range reviews {
		write(c, "orld")
	}
	expectAnswered(t, "the API server's review", reviews)
	if code := dialFrom(t, "127.0.3.1", a).get(); code != http.StatusOK {
		t.Errorf("the API server's newcomer, holding the most: %d, want an idle connection to give way", code)
	}
	if got := listenerCounts(t, endpoint)[`bar_controller_listener_connections_refused_total{reason="evicted"}`]; got != 4 {
		t.Errorf("evicted %v, want 4: an idle connection for each newcomer", got)
	}
}

// waitMovedAfterIdle waits until every connection of src has moved after
// every idle connection last did.
func waitMovedAfterIdle(t *testing.T, l *limitListener, src string) {
	t.Helper()
	for deadline := time.Now().Add(hangBound); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		var idleLast, srcFirst uint64
		srcFirst = ^uint64(0)
		for s, conns := range l.bySource {
			for _, c := range conns {
				switch {
				case s == src:
					srcFirst = min(srcFirst, c.last.Load())
				case c.state.Load() == connIdle:
					idleLast = max(idleLast, c.last.Load())
				}
			}
		}
		l.mu.Unlock()
		if srcFirst > idleLast {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's connections did not move after the idle ones within %v", src, hangBound)
		}
	}
}
