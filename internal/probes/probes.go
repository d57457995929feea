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

// Package probes serves the kubelet's liveness (/healthz) and readiness
// (/readyz) probes.
package probes

import (
	"errors"
	"fmt"
	"net/http"

	"k8s.io/client-go/tools/leaderelection"
)

// Handler serves the probes. /healthz fails only when the process
// is wedged: its leader election has stopped renewing a lease it holds.
// /readyz fails while ready returns an error: CachesSynced, or, with the
// conversion webhook on, the webhook's readiness.
//
// Why not cache sync with the webhook on: the Service routes the API
// server's ConversionReviews only to ready Pods, and the informers of a
// new release cannot sync until the Bars still stored as v1alpha1 have
// been converted, by a ready webhook. During an upgrade, with every old
// Pod gone, readiness gated on the caches would wait for itself.
//
// status, if given, is what a ready /readyz answers instead of "ok": a
// sharded replica names the shards it holds.
func Handler(ready func() error, watchdog *leaderelection.HealthzAdaptor, status ...func() string) http.Handler {
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
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		for _, s := range status {
			fmt.Fprintln(w, s())
		}
		if len(status) == 0 {
			fmt.Fprintln(w, "ok")
		}
	})
	return mux
}

// CachesSynced is ready once the informer caches have synced, on standbys
// too, since they must be ready to take over.
func CachesSynced(synced func() bool) func() error {
	return func() error {
		if !synced() {
			return errors.New("informer caches not synced")
		}
		return nil
	}
}
