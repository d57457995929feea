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
	"net/http"
)

// A connection's state, as the connection limits see it (limitedConn's
// state): set from the server's callbacks and the handler's wrappers, so
// that the listener knows which connections may give way to a newcomer.

const (
	connIdle int32 = iota
	connBusy
	// connWaiting: a request is in a handler, and the connection waits on
	// its caller, for the rest of the body (awaitBody to bodyDone) or to
	// take an answer the kernel has no more room for (limitedConn.Write).
	connWaiting
	connEvicted
)

type connKey struct{}

type headerConnKey struct{}

// connContext remembers a request's connection in its context
// (http.Server.ConnContext), so that the handler can mark it served, and
// tell the header count where the body ends (startBody).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*headerConn); ok {
		ctx = context.WithValue(ctx, headerConnKey{}, hc)
	}
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok { // *headerConn, *tls.Conn
		c = nc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// startBody tells the request's header count the length of its body
// (headerConn.startBody), and says whether the request was sent before
// the answer to the one before it: read ahead, its lines uncounted.
func startBody(ctx context.Context, declared int64) (pipelined bool) {
	hc, ok := ctx.Value(headerConnKey{}).(*headerConn)
	if !ok {
		return false
	}
	return hc.startBody(declared)
}

// markServed records that a request on the connection reached a handler:
// the connection is busy until its answer is finished (markIdle).
func markServed(ctx context.Context) {
	if lc, ok := ctx.Value(connKey{}).(*limitedConn); ok {
		lc.served.Store(true)
		lc.state.CompareAndSwap(connIdle, connBusy)
	}
}

// awaitBody records that the request's handler is about to wait for a
// body (bodyDeadline) and returns its connection, to tell when the body is
// all in (bodyDone); nil if the connection is not a limited one.
func awaitBody(ctx context.Context) *limitedConn {
	lc, ok := ctx.Value(connKey{}).(*limitedConn)
	if !ok {
		return nil
	}
	lc.state.CompareAndSwap(connBusy, connWaiting)
	return lc
}

// bodyDone records that the connection's request body is all in: from now
// on its handler, not its caller, decides how long it stays busy.
func (c *limitedConn) bodyDone() {
	if c != nil {
		c.state.CompareAndSwap(connWaiting, connBusy)
	}
}

// markIdle records that the connection's last answer is finished and it
// waits for another request (http.Server.ConnState's StateIdle, which
// net/http reports once the answer is written, so a connection is not
// closed for another while it still writes one).
func markIdle(c net.Conn, state http.ConnState) {
	if state != http.StateIdle {
		return
	}
	if hc, ok := c.(*headerConn); ok {
		hc.nextRequest()
	}
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok { // *headerConn, *tls.Conn
		c = nc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		// connWaiting too: a handler that answered without reading its
		// body, which net/http then read to the end.
		if !lc.state.CompareAndSwap(connBusy, connIdle) {
			lc.state.CompareAndSwap(connWaiting, connIdle)
		}
	}
}
