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
	// source cannot hold the listener, and a few cannot hold it together,
	// since at Total the source holding the most gives way (below).
	PerSource int
	// Trusted are addresses the operator says only the API server calls
	// from: none of their connections is refused for PerSource or given
	// way, and at Total one of them takes the oldest connection of the
	// other source holding the most.
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
// PerSource is closed at once. At Total, a new connection from a source
// that holds fewer than the source holding the most, less one, closes
// that source's oldest connection and takes its place; otherwise it is
// closed at once. So sources share the listener evenly when it is full:
// k sources flooding it leave every other source its own connections,
// unless there are as many flooding sources as Total. The API server, the
// kubelet and Prometheus each call from an address of their own, with a
// few connections, and keep them whatever other Pods open.
//
// Refused and evicted connections are closed with a reset (SO_LINGER 0):
// nothing of them lingers in the kernel, and a client with a request to
// send (the API server's webhook client) sees "connection reset", which
// it retries, rather than an EOF it may not.
type limitListener struct {
	net.Listener
	endpoint string
	limits   ConnLimits

	mu       sync.Mutex
	open     int
	bySource map[string][]*limitedConn // oldest first
	trusted  map[string]bool           // the sources connected now that ConnLimits.Trusted holds
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
		heaviest, most := "", 0
		for s, conns := range l.bySource {
			if len(conns) > most && !l.trusted[s] {
				heaviest, most = s, len(conns)
			}
		}
		// Only a source that would still hold more than this one after
		// giving way gives way: two sources never take turns evicting
		// each other. A trusted source takes from any other.
		if most == 0 || (!trusted && most <= mine+1) {
			return nil, nil, metrics.ListenerRefusedTotal
		}
		victim = l.bySource[heaviest][0]
		l.forgetLocked(victim)
	}
	if trusted {
		l.trusted[src] = true
	}
	admitted = &limitedConn{Conn: c, l: l, source: src}
	l.bySource[src] = append(l.bySource[src], admitted)
	l.open++
	metrics.SetListenerConnections(l.endpoint, l.open)
	return admitted, victim, ""
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
	// served is set once a request on it reached a handler (markServed).
	served atomic.Bool

	forgotten bool // guarded by l.mu
	closeOnce sync.Once
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

type connKey struct{}

// connContext remembers a request's connection in its context
// (http.Server.ConnContext), so that the handler can mark it served.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = nc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// markServed records that a request on the connection reached a handler.
func markServed(ctx context.Context) {
	if lc, ok := ctx.Value(connKey{}).(*limitedConn); ok {
		lc.served.Store(true)
	}
}
