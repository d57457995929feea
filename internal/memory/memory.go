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

// Package memory is bar-controller's garbage-collection policy: how far the
// heap may grow between collections (GOGC, tuned after every collection)
// and the soft memory limit (GOMEMLIMIT) taken from the container's cgroup.
// It is process plumbing that main calls once at start.
package memory

import (
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// The controller's memory is its caches (about 6 KB per Bar, the root package's trim.go) and
// the garbage between two collections. With Go's default GOGC=100 a
// collection starts when the heap has doubled since the last one, so a
// cold start, whose garbage is every decoded watch event and response,
// peaks at twice the live heap (docs/measurements.md, Memory). Two things
// bound that here:
//
//   - the heap may grow past what the last collection found live by
//     --gc-headroom-percent of it (GOGC's own rule, with another percent),
//     but by never less than MinHeadroom, so that a small controller does
//     not collect more often than Go would for memory nobody misses;
//   - without GOMEMLIMIT, the soft limit is 90 % of the container's memory
//     limit (cgroup v2 memory.max), so that the collector works harder near
//     the limit instead of the kernel killing the container at it.
//
// A lower percent costs CPU: the collector's work per collection is the
// live heap, and collections come 100/percent times as often as with
// GOGC=100.

// MinHeadroom is the least the heap may grow between collections.
const MinHeadroom = 32 << 20

// memoryLimitShare is the part of the container's memory limit given to
// the Go runtime's soft limit when GOMEMLIMIT is not set: the rest is for
// what the runtime does not count (the binary's text, kernel buffers), as
// the shipped manifests' GOMEMLIMIT (about 90 %, test/e2e checks it).
const memoryLimitShare = 0.9

// SetUp applies the policy above. GOGC or GOMEMLIMIT in the
// environment take precedence over the part they set.
func SetUp(logger klog.Logger, headroomPercent int) {
	// The runtime treats an empty GOGC or GOMEMLIMIT as unset; so does this.
	if os.Getenv("GOMEMLIMIT") == "" {
		if limit, ok := containerMemoryLimit(); ok {
			soft := int64(float64(limit) * memoryLimitShare)
			debug.SetMemoryLimit(soft)
			logger.Info("Memory limit from the container's cgroup", "cgroupLimit", limit, "goMemLimit", soft)
		}
	}
	if os.Getenv("GOGC") != "" || headroomPercent <= 0 {
		return
	}
	// From the first collection on: until then the heap is below Go's
	// own minimum (4 MB) anyway.
	t := &gcTuner{logger: logger, percent: headroomPercent, current: 100}
	t.minHeadroom.Store(MinHeadroom)
	t.arm()
}

// gcTuner sets GOGC after each collection from the live heap it found.
// Its tunes run on the finalizer goroutine.
type gcTuner struct {
	logger      klog.Logger
	percent     int
	minHeadroom atomic.Uint64 // atomic for tests, which change it
	// setGCPercent is debug.SetGCPercent, or nil for it; tests hold a
	// tune in it.
	setGCPercent func(int) int

	// mu is held by a tune from its look at stopped until it has set
	// GOGC and re-armed, and by stop: so a tune under way when stop is
	// called has ended when stop returns, and none starts after. A flag
	// alone (as before) let a tune that had read it set GOGC after stop,
	// over whatever the caller set next.
	mu      sync.Mutex
	stopped bool
	current int
}

// gcSentinel is garbage as soon as it is made; its finalizer runs after
// the collection that finds it so, and makes the next one. It holds a
// pointer so that it is not packed with other small objects by the tiny
// allocator, which could delay it past its collection.
type gcSentinel struct{ t *gcTuner }

func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{t: t}, func(s *gcSentinel) { s.t.collected() })
}

// collected runs on the finalizer goroutine after a collection.
func (t *gcTuner) collected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.tune()
	t.arm()
}

// stop ends the tuning for good (the controller never stops it; tests
// do, and then restore GOGC). A sentinel armed already finds it stopped.
func (t *gcTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
}

var liveHeapSample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

func (t *gcTuner) tune() {
	metrics.Read(liveHeapSample)
	var live uint64
	if liveHeapSample[0].Value.Kind() == metrics.KindUint64 {
		live = liveHeapSample[0].Value.Uint64()
	}
	if p := GCPercent(live, t.percent, t.minHeadroom.Load()); p != t.current {
		set := debug.SetGCPercent
		if t.setGCPercent != nil {
			set = t.setGCPercent
		}
		set(p)
		t.current = p
		t.logger.V(4).Info("GOGC set from the live heap", "liveHeap", live, "gogc", p)
	}
}

// GCPercent is the GOGC that lets a heap of live bytes grow by percent of
// it, or by minHeadroom bytes if that is more, in steps of 10 so that a
// live heap that wobbles does not reset it at every collection, and never
// more than 100 (Go's default) unless percent is.
func GCPercent(live uint64, percent int, minHeadroom uint64) int {
	p := percent
	if live > 0 && minHeadroom*100/live > uint64(p) {
		p = int(min(minHeadroom*100/live, 1000))
	}
	p = (p + 9) / 10 * 10
	return min(p, max(100, percent))
}

// containerMemoryLimit is the memory limit of this process's cgroup (v2):
// its memory.max, found through /proc/self/cgroup; where the container
// has its own cgroup namespace, that is /sys/fs/cgroup/memory.max itself.
func containerMemoryLimit() (int64, bool) {
	dir := "/sys/fs/cgroup"
	if raw, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if p, ok := cgroupV2Path(string(raw)); ok {
			dir = path.Join(dir, p)
		}
	}
	raw, err := os.ReadFile(path.Join(dir, "memory.max"))
	if err != nil {
		return 0, false
	}
	return parseMemoryMax(string(raw))
}

// cgroupV2Path is the path of the unified hierarchy's cgroup in the
// contents of /proc/self/cgroup: the line "0::<path>".
func cgroupV2Path(procSelfCgroup string) (string, bool) {
	for _, line := range strings.Split(procSelfCgroup, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") {
			return p, true
		}
	}
	return "", false
}

// parseMemoryMax reads a cgroup v2 memory.max: a number of bytes, or
// "max" for no limit.
func parseMemoryMax(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
