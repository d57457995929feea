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
func Serve(ctx context.Context, name, addr string, h http.Handler, tlsConfig *tls.Config) (stop func(), err error) {
	if addr == "0" || addr == "" {
		return func() {}, nil
	}
	_, stop, err = Listen(ctx, name, addr, h, tlsConfig)
	return stop, err
}

// Timeouts every endpoint gets. A request's headers and body must arrive
// within ReadTimeout of its first byte, so a caller that sends a byte a
// second holds a goroutine and a connection for that long, not forever;
// no endpoint takes a body that the network between Pods needs seconds to
// carry. An idle keep-alive connection is closed after IdleTimeout, so
// idle sockets cannot pile up either. There is no default WriteTimeout: a
// CPU profile (/debug/pprof/profile) writes its answer only after the
// seconds it was asked to sample; endpoints whose answers are quick set
// one (WithWriteTimeout).
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	IdleTimeout       = 90 * time.Second
)

// Option changes one endpoint's server from the defaults above.
type Option func(*http.Server)

// WithReadTimeout bounds how long a request's headers and body may take to
// arrive.
func WithReadTimeout(d time.Duration) Option {
	return func(s *http.Server) { s.ReadTimeout = d }
}

// WithWriteTimeout bounds how long answering a request may take, from the
// end of its headers until the answer is written: a caller that does not
// read its answer holds the handler no longer than that.
func WithWriteTimeout(d time.Duration) Option {
	return func(s *http.Server) { s.WriteTimeout = d }
}

// Listen is Serve, always on, and also returns the address it listens on
// (the port, when addr asked for any with ":0").
func Listen(ctx context.Context, name, addr string, h http.Handler, tlsConfig *tls.Config, opts ...Option) (net.Addr, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s endpoint: %w", name, err)
	}
	bound := l.Addr()
	scheme := "http"
	if tlsConfig != nil {
		l, scheme = tls.NewListener(l, tlsConfig), "https"
	}
	// Requests carry the logger, not the cancellation: a scrape in flight
	// at shutdown ends through Shutdown below.
	base := context.WithoutCancel(ctx)
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: h,
		ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, IdleTimeout: IdleTimeout,
		BaseContext: func(net.Listener) context.Context { return base },
		ErrorLog:    log.New(serverErrors{logger.WithValues("endpoint", name)}, "", 0)}
	for _, o := range opts {
		o(srv)
	}
	logger.Info("Serving", "endpoint", name, "address", bound.String(), "scheme", scheme)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server failed", "endpoint", name)
		}
	}()
	return bound, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}, nil
}

// serverErrors sends net/http's own messages, such as a failed TLS
// handshake (a client that does not trust the certificate yet), to the
// structured log with the endpoint's name, rather than as bare lines on
// stderr.
type serverErrors struct{ logger klog.Logger }

func (w serverErrors) Write(p []byte) (int, error) {
	w.logger.Info("HTTP server error", "err", strings.TrimSpace(string(p)))
	return len(p), nil
}
