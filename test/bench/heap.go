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
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Peak RSS is what the target is set on, but it mixes what the controller
// keeps with what the garbage collector has not yet freed: with Go's
// default GOGC=100 the heap may grow to twice what is live before a
// collection. The live heap after convergence, from the controller's own
// heap profile (--profiling), is what its caches and event series hold,
// and says where: the report lists its largest holders.

// heapSummary is the controller's heap right after a collection.
type heapSummary struct {
	Live int64
	// Top are the functions that allocated the most of what is live, with
	// their bytes, largest first.
	Top []holder
}

type holder struct {
	Func  string
	Bytes int64
}

// liveHeap asks the controller's metrics endpoint for a heap profile,
// with a collection first (gc=1) so that in-use means live. The endpoint
// is HTTPS with a certificate the controller made itself, and lets in
// whoever the API server says may get /debug/pprof/heap: the bench's
// admin token. The profile is also written to save, for go tool pprof.
func liveHeap(ctx context.Context, metricsAddr, token, save string, top int) (heapSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return heapSummary{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := loopbackClient()
	resp, err := client.Do(req)
	if err != nil {
		return heapSummary{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return heapSummary{}, fmt.Errorf("heap profile: %s", resp.Status)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return heapSummary{}, fmt.Errorf("heap profile: %w", err)
	}
	if err := os.WriteFile(save, raw, 0o644); err != nil {
		return heapSummary{}, err
	}
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		return heapSummary{}, fmt.Errorf("heap profile: %w", err)
	}
	s, err := summarize(p, top)
	if err != nil {
		return s, err
	}
	// The profile samples one allocation per 512 KB on average, so its
	// total is an estimate, off by tens of percent for a heap of 20 MB.
	// The runtime's own count right after a second collection is exact:
	// the holders stay the profile's, the total is this.
	if s.Live, err = heapAllocAfterGC(ctx, client, metricsAddr, token); err != nil {
		return s, err
	}
	return s, nil
}

// heapAllocAfterGC reads runtime.MemStats.HeapAlloc from the text form of
// the heap profile, which collects first (gc=1) and prints the MemStats
// it read after that collection: the bytes of live objects, plus only
// what was allocated since, which an idle controller hardly does.
func heapAllocAfterGC(ctx context.Context, client *http.Client, metricsAddr, token string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("heap profile (text): %s", resp.Status)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("heap profile (text): %w", err)
	}
	return parseHeapAlloc(raw)
}

// parseHeapAlloc finds the "# HeapAlloc = N" line of a text heap profile.
func parseHeapAlloc(text []byte) (int64, error) {
	for line := range strings.Lines(string(text)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "# HeapAlloc = "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("heap profile (text): no HeapAlloc line")
}

// summarize adds up inuse_space, in total and by the function that made
// each allocation (the leaf of its stack).
func summarize(p *profile.Profile, top int) (heapSummary, error) {
	idx := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "inuse_space" })
	if idx < 0 {
		return heapSummary{}, fmt.Errorf("heap profile without inuse_space")
	}
	var s heapSummary
	byFunc := map[string]int64{}
	for _, sample := range p.Sample {
		v := sample.Value[idx]
		s.Live += v
		byFunc[leaf(sample)] += v
	}
	for f, b := range byFunc {
		s.Top = append(s.Top, holder{Func: f, Bytes: b})
	}
	slices.SortFunc(s.Top, func(a, b holder) int { return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Func, b.Func)) })
	if len(s.Top) > top {
		s.Top = s.Top[:top]
	}
	return s, nil
}

// leaf names the innermost function of a sample's stack that is not the
// allocator itself.
func leaf(s *profile.Sample) string {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil || strings.HasPrefix(line.Function.Name, "runtime.") {
				continue
			}
			return line.Function.Name
		}
	}
	return "(unknown)"
}

func (s heapSummary) describe() string {
	parts := make([]string, len(s.Top))
	for i, h := range s.Top {
		parts[i] = fmt.Sprintf("`%s` %.1f MB", h.Func, mb(h.Bytes))
	}
	return strings.Join(parts, ", ")
}

// profileCPU asks the server at base (the controller's metrics endpoint,
// or with --apiserver-profile the API server) for a CPU profile of the
// next s.cpuProfile and writes it to save; the channel says when it is
// done.
// Only to find where the controller's time goes: the profiler's own cost
// is small, but not nothing, so a profiled bench prints its table and
// writes no report (main.go).
func (s scenario) profileCPU(ctx context.Context, base, token, save string) <-chan error {
	done := make(chan error, 1)
	if s.cpuProfile <= 0 {
		done <- nil
		return done
	}
	go func() {
		done <- func() error {
			// Whole seconds, at least one: pprof reads seconds=0 as its default, 30.
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, max(1, int(math.Ceil(s.cpuProfile.Seconds()))))
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := loopbackClient().Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s", resp.Status)
			}
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			return os.WriteFile(save, raw, 0o644)
		}()
	}()
	return done
}
