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
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/barcontroller/bar-controller/internal/metrics"
)

// ConnLimits bound the connections one listener holds open: every open
// connection costs a goroutine, its buffers and, over TLS, a handshake and
// the TLS buffers, before any handler runs (about 60 KiB at most over TLS
// with a header just under MaxHeaderBytes: TestConnectionMemory), and any
// Pod can open them.
type ConnLimits struct {
	// Total is the most connections open at once.
	Total int
	// PerSource is the most from one source address (a Pod, a node): one
	// source cannot hold the listener, and at Total an idle connection
	// gives way to a new one (below), so no number of sources can hold it
	// with connections that do nothing.
	PerSource int
	// Trusted are addresses the operator says only the API server calls
	// from: none of their connections is refused for PerSource or given
	// way, and at Total one of them takes the connection of another
	// source that moved least, idle or waiting on its caller, or, if none
	// is, the oldest of the source holding the most, request in flight or
	// not: its call matters more than theirs.
	// Without them the API server is a source like any other, whose
	// connections limitListener keeps because they move.
	Trusted []netip.Prefix
}

func (l ConnLimits) trusted(src netip.Addr) bool {
	for _, p := range l.Trusted {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

// limitListener enforces ConnLimits as it accepts. A connection over
// PerSource is closed at once. At Total, a new connection closes one that
// may give way and takes its place: of those, the one whose caller made
// progress least recently. A connection may give way while it is idle (no
// request on it has reached a handler since its last answer: kept alive
// between requests, or opened with its headers not all arrived, at most
// ReadHeaderTimeout), or while it waits on its caller (its handler waits
// for the rest of a body, or an answer waits for the caller to read the
// one before: limitedConn.Write) if its source holds more than the
// newcomer's and one: a request cut is a request lost, so equals do not
// take turns cutting each other's. Progress is a byte read from the
// caller or a write it took (limitedConn.Read and Write), and admission:
// the order of the last of them, one clock for the listener, not a time.
//
// Why the least recent progress, and not the source holding the most
// (issue 39, sixth review, M2): sources are told apart only by address,
// and the API server, with reviews in flight, is often the largest; a
// dozen Pods that each held fewer, idle, made it the one to give way, and
// its reviews waiting for the rest of their bodies were cut while their
// idle connections stayed (14 % of 3,337 reviews failed), and its new
// connections were refused, since it could take only from a larger source.
// What tells its connections from a flood's is that they move: the API
// server sends a body whole within milliseconds of its headers, reads its
// answer as it comes, and reuses a connection at once or leaves it idle.
// A flood's connections hold their places by doing nothing: idle
// keep-alives (issue 39, C2: Total sources holding one each refused the
// kubelet's probes), bodies trickled at the listener's pace (round-2
// review, M1: four Pods of 64 kept every slot, the API server got 5 of
// 110 reviews answered) or answers left unread (third review, C1). So the
// connection that has waited longest on its caller gives way. The API
// server's new connection and the one it was just answered on have the
// most recent progress, and give way only if every other connection that
// may has moved since: a Pod that dialled and dropped its connections
// took those of the API server every time under the rule before the size
// rule (fifth review, C1: 121 of 213 conversions failed), and takes the
// connections that moved least now. A cut that costs the API server a
// review needs every other place that may give way to have moved within
// the milliseconds its own did, 256 connections' worth of bytes or
// connects in that time. The API server sends a conversion's POST once,
// and client-go retries a reset only for a GET, so a review cut so fails.
//
// A connection whose request is in a handler that waits on nobody is
// never closed for another (but for a Trusted one's): that would cut a
// call mid-flight, perhaps the API server's review mid-conversion, and
// the handler, not the caller, decides how long it lasts. If every
// connection is so, or waits on a caller of a source no larger than the
// newcomer's and one, the new one is closed at once.
//
// Refused and evicted connections are closed with a reset (SO_LINGER 0):
// nothing of them lingers in the kernel.
type limitListener struct {
	net.Listener
	endpoint string
	limits   ConnLimits

	mu       sync.Mutex
	open     int
	bySource map[string][]*limitedConn // oldest first
	trusted  map[string]bool           // the sources connected now that ConnLimits.Trusted holds
	seq      uint64                    // connections admitted so far: their order, oldest first
	// progress orders the connections' progress: each admission, read of
	// a caller's bytes and write a caller took takes the next value.
	progress atomic.Uint64
	// draining is set as the server shuts down (Listen's stop).
	draining atomic.Bool
}

func newLimitListener(l net.Listener, endpoint string, limits ConnLimits) *limitListener {
	return &limitListener{Listener: l, endpoint: endpoint, limits: limits,
		bySource: map[string][]*limitedConn{}, trusted: map[string]bool{}}
}

// Accept returns the next connection within the limits; the ones it
// refuses never reach the server.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, victim, reason := l.admit(c)
		if victim != nil {
			metrics.RecordListenerRefused(l.endpoint, metrics.ListenerEvicted)
			victim.reset()
		}
		if lc == nil {
			metrics.RecordListenerRefused(l.endpoint, reason)
			resetConn(c)
			continue
		}
		capBuffers(c)
		return lc, nil
	}
}

// admit decides on c: admitted (and perhaps an open connection to close
// for it), or refused and why.
func (l *limitListener) admit(c net.Conn) (admitted, victim *limitedConn, reason string) {
	src, addr := sourceOf(c.RemoteAddr())
	trusted := l.limits.trusted(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := len(l.bySource[src])
	if !trusted && l.limits.PerSource > 0 && mine >= l.limits.PerSource {
		return nil, nil, metrics.ListenerRefusedSource
	}
	if l.limits.Total > 0 && l.open >= l.limits.Total {
		if victim = l.victimLocked(trusted, mine); victim == nil {
			return nil, nil, metrics.ListenerRefusedTotal
		}
		l.forgetLocked(victim)
	}
	if trusted {
		l.trusted[src] = true
	}
	l.seq++
	admitted = &limitedConn{Conn: c, l: l, source: src, seq: l.seq}
	admitted.moved()
	l.bySource[src] = append(l.bySource[src], admitted)
	l.open++
	metrics.SetListenerConnections(l.endpoint, l.open)
	return admitted, victim, ""
}

// victimLocked picks the connection to close for a new one at Total, and
// marks it evicted, or returns nil: of the untrusted connections that may
// give way to a newcomer whose source holds mine (limitListener), the one
// whose caller made progress least recently. For a trusted newcomer,
// failing those, the oldest connection of the untrusted source holding
// the most, whatever its state.
func (l *limitListener) victimLocked(trusted bool, mine int) *limitedConn {
	if trusted {
		mine = 0 // any source's waits may give way to it
	}
	if c := l.pickLocked(mine); c != nil {
		return c
	}
	if !trusted {
		return nil
	}
	var best *limitedConn
	for s, conns := range l.bySource {
		if !l.trusted[s] && (best == nil || len(conns) > len(l.bySource[best.source]) ||
			(len(conns) == len(l.bySource[best.source]) && conns[0].seq < best.seq)) {
			best = conns[0]
		}
	}
	if best != nil {
		best.state.Store(connEvicted)
	}
	return best
}

// pickLocked marks evicted, and returns, the connection victimLocked
// picks to give way to a newcomer whose source holds mine, or nil.
func (l *limitListener) pickLocked(mine int) *limitedConn {
	for {
		var best *limitedConn
		var bestLast uint64
		var bestState int32
		for s, conns := range l.bySource {
			if l.trusted[s] {
				continue
			}
			mayWait := len(conns) > mine+1
			for _, c := range conns {
				state := c.state.Load()
				if state != connIdle && (state != connWaiting || !mayWait) {
					continue
				}
				if last := c.last.Load(); best == nil || last < bestLast {
					best, bestLast, bestState = c, last, state
				}
			}
		}
		if best == nil {
			return nil
		}
		// Its state may have changed since (a request reached a handler,
		// a body was all read, a write returned): then look again.
		if best.state.CompareAndSwap(bestState, connEvicted) {
			return best
		}
	}
}

// forgetLocked stops counting c, once.
func (l *limitListener) forgetLocked(c *limitedConn) {
	if c.forgotten {
		return
	}
	c.forgotten = true
	conns := l.bySource[c.source]
	for i, o := range conns {
		if o == c {
			conns = append(conns[:i], conns[i+1:]...)
			break
		}
	}
	if len(conns) == 0 {
		delete(l.bySource, c.source) // maps of the sources connected now, no more
		delete(l.trusted, c.source)
	} else {
		l.bySource[c.source] = conns
	}
	l.open--
	metrics.SetListenerConnections(l.endpoint, l.open)
}

// limitedConn is a connection the listener counts until it is closed.
type limitedConn struct {
	net.Conn
	l      *limitListener
	source string
	seq    uint64 // its order of admission
	// served is set once a request on it reached a handler (markServed).
	served atomic.Bool
	// state is connIdle, connBusy while a request is in a handler and its
	// answer not yet finished (markServed to markIdle), connWaiting while
	// it waits on the caller (connstate.go), or connEvicted once the
	// listener chose to close it: a request that reaches a handler after
	// that does not make it busy, and one in a handler that waits on
	// nobody keeps it from being chosen (victimLocked).
	state atomic.Int32
	// last is the listener's progress value at the caller's last
	// progress on it (moved).
	last atomic.Uint64

	forgotten bool // guarded by l.mu
	closeOnce sync.Once
}

// moved records progress on the connection (limitListener).
func (c *limitedConn) moved() { c.last.Store(c.l.progress.Add(1)) }

// Read is the connection's read; bytes from the caller are progress.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.moved()
	}
	return n, err
}

// Write is the connection's write, marked as a wait on the caller while
// it lasts if a request is in a handler: a write returns as soon as the
// kernel has taken the bytes, so one that lasts is one whose caller does
// not read its answers. Without it, a caller that pipelined requests and
// read none of the answers held its connection busy, never to give way,
// for as long as it liked: four Pods of 16 such connections kept the
// kubelet's probes out of every replica (issue 39, third review, C1). A
// write the caller took is progress.
func (c *limitedConn) Write(p []byte) (int, error) {
	// A write begins the wait on the caller now: the time the handler
	// took before it (a conversion of a second) is not the caller's, and
	// without this the API server's connection looked the stalest while
	// its answer's first bytes went out (eighth review, m2).
	c.moved()
	if c.state.CompareAndSwap(connBusy, connWaiting) {
		defer c.state.CompareAndSwap(connWaiting, connBusy)
	}
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.moved()
	}
	return n, err
}

func (c *limitedConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		// Counted before the gauge drops: a reader that sees the
		// connection gone sees it counted.
		if !c.served.Load() {
			metrics.RecordListenerUnserved(c.l.endpoint)
		}
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
		// A connection closed with bytes its caller has not taken is
		// reset, not closed: closed, the kernel keeps it as an orphan
		// until they are delivered, minutes for a caller that never
		// reads, with its buffers and outside every count here. Four
		// addresses that asked and never read made one webhook's kernel
		// hold 4,034 such orphans and 170 MB within 12 s (issue 39,
		// fourth review, C1). A caller that reads its answers has taken
		// them by the close: net/http closes half a second after its
		// last write, and the idle timeout long after.
		// Not while the server shuts down: then the callers are ones it
		// served, whose answers are still on their way, and the process
		// ends anyway (fifth review, m1).
		if !c.l.draining.Load() && unsent(c.Conn) > 0 {
			metrics.RecordListenerUnread(c.l.endpoint)
			resetConn(c.Conn)
		}
		err = c.Conn.Close()
	})
	return err
}

// CloseWrite half-closes the connection, as net/http does after an error
// answer (a 431) so that the caller reads it before the connection ends.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// reset closes an evicted connection; the server's goroutine serving it
// sees its next read or write fail, and ends.
func (c *limitedConn) reset() {
	c.served.Store(true) // counted as evicted, not as unserved
	resetConn(c.Conn)
	_ = c.Close()
}

// socketBuffer caps each connection's kernel send and receive buffers
// (Linux keeps twice what is set, for its own bookkeeping). Left to the
// kernel, they grow to 4 MiB and 6 MiB each for a peer that sends fast or
// reads slowly: a caller that pipelined requests and read none of the
// answers made a replica's webhook hold 425 MB of answers in its send
// buffers within 30 s, none of it in the Go heap that TestConnectionMemory
// measures, and on cgroup v2 all of it charged to the Pod (issue 39, third
// review, M1). 32 KiB bounds a listener's connections to about 128 KiB
// each in the kernel: 32 MiB for the webhook's 256, 8 MiB for the 64 of
// the metrics endpoint and of the probes. It costs nothing the callers
// need: the API server's largest review, 4 MiB each way, moves 64 KiB a
// round trip, hundreds of MB/s between Pods.
const socketBuffer = 32 << 10

func capBuffers(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(socketBuffer)
		_ = tc.SetWriteBuffer(socketBuffer)
	}
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// sourceOf is the address a connection comes from, without its port: one
// Pod, one source, however many connections it opens. An IPv4 address
// mapped into IPv6 (a dual-stack socket) is its IPv4 address.
func sourceOf(a net.Addr) (string, netip.Addr) {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		addr := ap.Addr().Unmap()
		return addr.String(), addr
	}
	return a.String(), netip.Addr{}
}
