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

// Package serving runs the controller's HTTP endpoints (metrics over HTTPS
// or HTTP, probes over HTTP, the conversion webhook over HTTPS) for as long
// as it runs.
package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Serve listens on addr ("0" turns it off) and serves h until ctx ends,
// over HTTPS if tlsConfig is set. It listens before returning, so a busy
// port fails start-up, loudly.
func Serve(ctx context.Context, name, addr string, h http.Handler, tlsConfig *tls.Config, opts ...Option) (stop func(), err error) {
	if addr == "0" || addr == "" {
		return func() {}, nil
	}
	_, stop, err = Listen(ctx, name, addr, h, tlsConfig, opts...)
	return stop, err
}

// Timeouts every endpoint gets. A request's headers and body must arrive
// within ReadTimeout of its first byte, so a caller that sends a byte a
// second holds a goroutine and a connection for that long, not forever;
// no endpoint takes a body that the network between Pods needs seconds to
// carry. An idle keep-alive connection is closed after IdleTimeout, so
// idle sockets cannot pile up either: 5 s, as the probes' and metrics'
// callers call seconds apart or more (the kubelet does not keep its
// probes' connections; Prometheus scrapes every 15 s or more, and opens a
// connection again for the next), and an idle connection held a slot of
// the connection limits for 90 s before (issue 39, C2); at Total an idle
// one gives way anyway (ConnLimits). The webhook, which the API server
// calls in bursts, keeps its own (internal/conversion). There is no
// default WriteTimeout: every endpoint sets its own (ForProbes,
// ForMetrics, the webhook's in internal/conversion).
//
// ReadHeaderTimeout is short because every caller sends its headers in one
// write: the API server, the kubelet and Prometheus, a few hundred bytes
// to a few KiB (a bearer token), which arrive in milliseconds. It also
// bounds a TLS handshake (net/http takes the least of its timeouts for
// that). MaxHeaderBytes bounds what a connection can make the server hold
// before any handler runs: net/http's default, 1 MiB (and 4 KiB of slack),
// let 100 connections that sent 1 MiB of header lines each and stalled
// hold 100 MiB of heap. 16 KiB is several times the largest header a
// caller sends, a Kubernetes bearer token included (a projected
// ServiceAccount token is about 1 KiB; an OIDC token with many groups a
// few KiB); a larger one is answered 431.
const (
	ReadHeaderTimeout = 3 * time.Second
	ReadTimeout       = 30 * time.Second
	IdleTimeout       = 5 * time.Second
	MaxHeaderBytes    = 16 << 10
)

// DefaultConnLimits bound the connections of an endpoint whose callers
// are few and call one request at a time: the kubelet's probes, a few
// Prometheus scrapers, each with a connection per target. 64 hold about
// 4 MiB at most over TLS (TestConnectionMemory). The metrics endpoint's
// token filter (internal/apiauth) still answers a flood of tokens with its
// own 429s within them: test/faults' TestMetricsAuthFlood, 200 requests a
// second from 8 addresses, got no connection reset. The webhook, which
// the API server calls as many times at once as it converts, sets its own
// (WithConnLimits).
var DefaultConnLimits = ConnLimits{Total: 64, PerSource: 16}

// Option changes one endpoint's server from the defaults above.
type Option func(*settings)

type settings struct {
	srv       *http.Server
	conns     ConnLimits
	bodies    bool
	bodyGrace time.Duration
}

// WithBodies lets requests carry a body. Without it a request that
// declares one is answered 413 and its connection closed at once: the
// probes and the metrics endpoint take none, and net/http would otherwise
// go on reading (or waiting for) a body the handler ignored, keeping the
// connection busy, where no idle one gives way to a newcomer: a few
// addresses declaring bodies they never send would keep every slot busy
// and the kubelet's probes out.
func WithBodies() Option {
	return func(s *settings) { s.bodies = true }
}

// WithReadTimeout bounds how long a request's headers and body may take to
// arrive.
func WithReadTimeout(d time.Duration) Option {
	return func(s *settings) { s.srv.ReadTimeout = d }
}

// WithIdleTimeout replaces IdleTimeout.
func WithIdleTimeout(d time.Duration) Option {
	return func(s *settings) { s.srv.IdleTimeout = d }
}

// WithConnLimits replaces DefaultConnLimits.
func WithConnLimits(l ConnLimits) Option {
	return func(s *settings) { s.conns = l }
}

// WithWriteTimeout bounds how long answering a request may take, from the
// end of its headers until the answer is written: a caller that does not
// read its answer holds the handler no longer than that.
func WithWriteTimeout(d time.Duration) Option {
	return func(s *settings) { s.srv.WriteTimeout = d }
}

// ForProbes is the probes' endpoint: one request a connection, answered
// within probeWriteTimeout. The kubelet opens a connection for each probe
// and closes it after the answer, so nothing it does needs keep-alive,
// and without it a connection cannot carry the pipelined requests whose
// unread answers kept a connection busy (limitedConn.Write).
func ForProbes() Option {
	return func(s *settings) {
		s.srv.SetKeepAlivesEnabled(false)
		s.srv.WriteTimeout = probeWriteTimeout
	}
}

// ForMetrics is the metrics endpoint's: answers written within
// MetricsWriteTimeout. A caller that pipelined requests and read none of
// the answers held its connection for as long as it liked, one of the
// places 64 addresses need to keep Prometheus out (issue 39, sixth
// review, m1); now it must come back every minute.
func ForMetrics() Option { return WithWriteTimeout(MetricsWriteTimeout) }

// MetricsWriteTimeout: a scrape's answer is written in milliseconds, and
// a CPU profile's (--profiling) after the seconds it samples: net/http's
// pprof refuses a profile of MetricsWriteTimeout or more, so up to 59 s,
// and 30 s is its default.
const MetricsWriteTimeout = time.Minute

// probeWriteTimeout: a probe's answer is a few bytes, written in
// microseconds; 5 s is the kubelet's own default probe timeout's several
// times (1 s) and still ends a write its caller does not read.
const probeWriteTimeout = 5 * time.Second

// Listen is Serve, always on, and also returns the address it listens on
// (the port, when addr asked for any with ":0").
func Listen(ctx context.Context, name, addr string, h http.Handler, tlsConfig *tls.Config, opts ...Option) (net.Addr, func(), error) {
	// Requests carry the logger, not the cancellation: a scrape in flight
	// at shutdown ends through Shutdown below.
	base := context.WithoutCancel(ctx)
	logger := klog.FromContext(ctx)
	srv := &http.Server{
		ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, IdleTimeout: IdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes,
		// HTTP/1.1 only, as every caller speaks it: an HTTP/2 connection
		// carries up to 250 requests at once, past the connection limits
		// that bound what one source holds. (The TLS configurations set
		// no NextProtos either; this says it to net/http too.)
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		// "OPTIONS *" goes to the handler like any request: net/http's own
		// answer to it skips bodyDeadline, and so the header count's
		// check for a request read ahead (headerConn.startBody).
		DisableGeneralOptionsHandler: true,
		BaseContext:                  func(net.Listener) context.Context { return base },
		ConnContext:                  connContext,
		// Tells the connection limits which connections are idle, and may
		// give way to a new one.
		ConnState: markIdle,
		ErrorLog:  log.New(serverErrors{logger.WithValues("endpoint", name)}, "", 0)}
	set := settings{srv: srv, conns: DefaultConnLimits, bodyGrace: BodyGrace}
	for _, o := range opts {
		o(&set)
	}
	if set.bodies {
		h = requireLength(h)
	} else {
		h = refuseBodies(h)
	}
	srv.Handler = bodyDeadline(name, srv.ReadTimeout, set.bodyGrace, h)
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s endpoint: %w", name, err)
	}
	bound := raw.Addr()
	// Counted and limited below TLS: a refused connection costs no
	// handshake.
	limited := newLimitListener(raw, name, set.conns)
	if listened != nil {
		listened(limited)
	}
	var l net.Listener = limited
	scheme := "http"
	if tlsConfig != nil {
		l, scheme = tls.NewListener(l, tlsConfig), "https"
	}
	// Above TLS, where the headers' lines can be counted (MaxHeaderLines).
	l = headerListener{Listener: l, logf: srv.ErrorLog.Printf}
	logger.Info("Serving", "endpoint", name, "address", bound.String(), "scheme", scheme)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server failed", "endpoint", name)
		}
	}()
	return bound, func() {
		limited.draining.Store(true)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}, nil
}

// listened, when a test sets it, is given each endpoint's connection
// limits as Listen starts them, so that the test can wait for the state
// it means to test (connections idle) rather than sleep for it.
var listened func(*limitListener)

// serverErrors sends net/http's own messages, such as a failed TLS
// handshake (a client that does not trust the certificate yet), to the
// structured log with the endpoint's name, rather than as bare lines on
// stderr.
type serverErrors struct{ logger klog.Logger }

func (w serverErrors) Write(p []byte) (int, error) {
	w.logger.Info("HTTP server error", "err", strings.TrimSpace(string(p)))
	return len(p), nil
}

// refuseBodies answers 413, and closes the connection, for a request that
// declares a body (WithBodies).
func refuseBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
			http.Error(w, "Request Entity Too Large: this endpoint takes no body", http.StatusRequestEntityTooLarge)
			// net/http still reads up to 256 KiB of an unread body after
			// the handler, even on a connection it will close, until the
			// body's deadline (BodyGrace): end that wait now.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			return
		}
		h.ServeHTTP(w, r)
	})
}
