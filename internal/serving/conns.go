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
	// way, and at Total one of them takes another source's idle
	// connection or, if none is idle, the oldest of the source holding the
	// most, request in flight or not: its call matters more than theirs.
	// Without them the API server is a source like any other, which the
	// fair shares of limitListener protect.
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
// PerSource is closed at once. At Total, a new connection closes an idle
// one and takes its place: the oldest idle one of the source holding the
// most, if that source holds more than the newcomer's. Idle means no
// request on it has reached a handler since its last answer: kept alive
// between requests, or opened with its headers not all arrived (at most
// ReadHeaderTimeout). Before issue 39's C2, only a source holding more
// than the newcomer's and one gave way, so Total sources holding one idle
// keep-alive each refused everyone else, the kubelet's probes included,
// and every replica's liveness probe failed. Any idle connection giving
// way, whatever its source held, would let a flood's sources, redialling
// as they are refused, take the API server's new connection in the
// milliseconds between its dial and its request. So a source that holds
// none, as the kubelet's probes, finds every idle connection open to it,
// and one that holds many only the idle ones of sources holding more.
//
// If none is idle, a connection that waits on its caller gives way, but
// only one of a source holding more than the newcomer's and one: the
// oldest such of the source holding the most. A connection waits on its
// caller while its handler waits for the rest of a body, or while an
// answer waits for the caller to read the one before (limitedConn.Write):
// those are the only ways to keep a connection busy for long without the
// replica's help. A body's bytes are the caller's to send, and the
// listener's pace (BodyGrace, MinBodyRate) lets it take seconds; four
// Pods of 64 connections each that declared bodies, sent them slowly and
// redialled as they were cut kept every slot of the webhook busy, and the
// API server got 5 of 110 reviews answered (issue 39, round-2 review,
// M1). Answers are the caller's to read, and a caller that pipelines
// requests and reads none holds the server's write as long as it likes:
// four Pods of 16 such connections kept the kubelet's probes out (third
// review, C1). Now a source's waits stay only while it holds no more than
// the newcomer's source and one, so to refuse the API server or the
// kubelet (a source holding none, or a few) the sources must hold about
// one each: Total of them. The API server sends a body whole within
// milliseconds of its headers and reads its answer as it comes, so its
// waits are short and, as it holds few connections, never the ones chosen
// while a larger source holds one that may give way (victimLocked). A
// review cut so fails: the API server sends a conversion's POST once, and
// client-go retries a reset only for a GET.
//
// A connection whose request is in a handler that waits on nobody is
// never closed for another (but for a Trusted one's): that would cut a
// call mid-flight, perhaps the API server's review mid-conversion, and
// the handler, not the caller, decides how long it lasts. If every
// connection is so, or waits on a caller of a source no larger than the
// newcomer's and one, the new one is closed at once.
//
// Refused and evicted connections are closed with a reset (SO_LINGER 0):
// nothing of them lingers in the kernel. A connection refused at accept
// carries no request yet; Go's transport dials again for a request that
// was never written.
type limitListener struct {
	net.Listener
	endpoint string
	limits   ConnLimits

	mu       sync.Mutex
	open     int
	bySource map[string][]*limitedConn // oldest first
	trusted  map[string]bool           // the sources connected now that ConnLimits.Trusted holds
	seq      uint64                    // connections admitted so far: their order, oldest first
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
	l.bySource[src] = append(l.bySource[src], admitted)
	l.open++
	metrics.SetListenerConnections(l.endpoint, l.open)
	return admitted, victim, ""
}

// victimLocked picks the connection to close for a new one at Total, and
// marks it evicted, or returns nil: of the untrusted source holding the
// most that has one, the oldest idle connection if the source holds more
// than mine (what the newcomer's source holds), or else the oldest
// connection waiting on its caller if it holds more than mine+1 (a
// request cut is a request lost, so only for a source that holds clearly
// more, and equals do not take turns cutting each other); idle before
// waiting of sources holding as many, the oldest on a tie. The source's
// size comes first: a source that holds a connection or two (the API
// server, reusing its own) gives nothing way while larger ones hold any
// it may take, whatever their states. Before, an idle connection came
// first wherever it was, and a Pod that dialled and dropped its
// connections, holding none at each dial, took the API server's fresh or
// just-answered connection while four others held every other place
// waiting for bodies: 121 of 213 conversions failed (issue 39, fifth
// review, C1). For a trusted newcomer, failing those, the oldest
// connection of the untrusted source holding the most, whatever its
// state.
func (l *limitListener) victimLocked(trusted bool, mine int) *limitedConn {
	if trusted {
		mine = 0 // any source's connection that may give way, first
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
		var bestN int
		var bestState int32
		better := func(c *limitedConn, n int, state int32) bool {
			switch {
			case best == nil || n != bestN:
				return best == nil || n > bestN
			case state != bestState:
				return state == connIdle
			default:
				return c.seq < best.seq
			}
		}
		for s, conns := range l.bySource {
			n := len(conns)
			if l.trusted[s] || n <= mine {
				continue
			}
			var idle, waiting *limitedConn
			for _, c := range conns { // oldest first
				switch c.state.Load() {
				case connIdle:
					if idle == nil {
						idle = c
					}
				case connWaiting:
					if waiting == nil {
						waiting = c
					}
				}
			}
			switch {
			case idle != nil:
				if better(idle, n, connIdle) {
					best, bestN, bestState = idle, n, connIdle
				}
			case waiting != nil && n > mine+1:
				if better(waiting, n, connWaiting) {
					best, bestN, bestState = waiting, n, connWaiting
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

	forgotten bool // guarded by l.mu
	closeOnce sync.Once
}

// Write is the connection's write, marked as a wait on the caller while
// it lasts if a request is in a handler: a write returns as soon as the
// kernel has taken the bytes, so one that lasts is one whose caller does
// not read its answers. Without it, a caller that pipelined requests and
// read none of the answers held its connection busy, never to give way,
// for as long as it liked: four Pods of 16 such connections kept the
// kubelet's probes out of every replica (issue 39, third review, C1).
func (c *limitedConn) Write(p []byte) (int, error) {
	if c.state.CompareAndSwap(connBusy, connWaiting) {
		defer c.state.CompareAndSwap(connWaiting, connBusy)
	}
	return c.Conn.Write(p)
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
