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

package probes

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestHealthHandler(t *testing.T) {
	var synced atomic.Bool
	h := Handler(CachesSynced(synced.Load), nil)
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before sync: %d, want 503", code)
	}
	if code := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200 (alive even before sync)", code)
	}
	synced.Store(true)
	if code := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after sync: %d, want 200", code)
	}
}

// With the conversion webhook on, /readyz says what the webhook's
// readiness says, whatever the caches: the reason is the webhook's.
func TestReadyzWebhook(t *testing.T) {
	var notReady atomic.Pointer[error]
	err := errors.New("the caBundle of CustomResourceDefinition bars.barcontroller.dev does not trust the serving certificate yet")
	notReady.Store(&err)
	h := Handler(func() error {
		if e := notReady.Load(); e != nil {
			return *e
		}
		return nil
	}, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "caBundle") {
		t.Errorf("/readyz while the webhook is not ready: %d %q, want 503 with the webhook's reason", rec.Code, rec.Body)
	}
	notReady.Store(nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz once the webhook is ready: %d, want 200", rec.Code)
	}
}
