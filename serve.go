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

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
)

// newMetricsHandler serves the registry in the Prometheus text format.
func newMetricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// newHealthHandler serves the probes. /healthz fails only when the process
// is wedged: its leader election has stopped renewing a lease it holds.
// /readyz fails until the informer caches have synced, on standbys too,
// since they must be ready to take over.
func newHealthHandler(synced func() bool, watchdog *leaderelection.HealthzAdaptor) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if watchdog != nil {
			if err := watchdog.Check(r); err != nil {
				http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serve listens on addr ("0" turns it off) and serves h until ctx ends.
// It listens before returning, so a busy port fails start-up, loudly.
func serve(ctx context.Context, name, addr string, h http.Handler) (stop func(), err error) {
	if addr == "0" || addr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s endpoint: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	logger := klog.FromContext(ctx)
	logger.Info("Serving", "endpoint", name, "address", l.Addr().String())
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server failed", "endpoint", name)
		}
	}()
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}, nil
}
