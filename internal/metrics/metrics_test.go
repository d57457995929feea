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

package metrics

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsHandlerServesSyncMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(syncsTotal, syncDuration)
	RecordSync(SyncSuccess, 3*time.Millisecond)
	rec := httptest.NewRecorder()
	Handler(reg, false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`bar_controller_syncs_total{result="success"}`,
		`bar_controller_sync_duration_seconds_bucket{result="success",le="0.0032"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}

// Syncs reads what /metrics serves for a result, and only that result.
func TestSyncsReadsTheCounter(t *testing.T) {
	read := func(result string) float64 {
		t.Helper()
		v, err := Syncs(result)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stale, errs := read(SyncStale), read(SyncError)
	RecordSync(SyncStale, time.Millisecond)
	RecordSync(SyncStale, time.Millisecond)
	if got := read(SyncStale) - stale; got != 2 {
		t.Errorf("Syncs(%q) grew by %v after two, want 2", SyncStale, got)
	}
	if got := read(SyncError) - errs; got != 0 {
		t.Errorf("Syncs(%q) grew by %v, want 0", SyncError, got)
	}
}

// The profiles are there only when asked for, and what /debug/pprof/heap
// serves is a heap profile pprof can read, not just a 200.
func TestHandlerProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		h := Handler(prometheus.NewRegistry(), profiling)
		get := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			return rec
		}
		if rec := get("/metrics"); rec.Code != http.StatusOK {
			t.Errorf("profiling=%v: /metrics %d", profiling, rec.Code)
		}
		rec := get("/debug/pprof/heap")
		if !profiling {
			if rec.Code != http.StatusNotFound {
				t.Errorf("profiling off: /debug/pprof/heap %d, want 404", rec.Code)
			}
			continue
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("profiling on: /debug/pprof/heap %d: %s", rec.Code, rec.Body)
		}
		p, err := profile.Parse(rec.Body)
		if err != nil {
			t.Fatalf("profiling on: /debug/pprof/heap is no profile: %v", err)
		}
		var types []string
		for _, st := range p.SampleType {
			types = append(types, st.Type)
		}
		if !slices.Contains(types, "inuse_space") {
			t.Errorf("profiling on: /debug/pprof/heap sample types %v, want inuse_space among them", types)
		}
	}
}
