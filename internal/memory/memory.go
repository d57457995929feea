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
// and the soft memory limit (GOMEMLIMIT) derived from the container's
// memory limit. It is process plumbing that main calls once at start.
package memory

import (
	"fmt"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// The controller's memory is its caches (about 6 KB per Bar, the root package's trim.go) and
// the garbage between two collections. With Go's default GOGC=100 a
// collection starts when the heap has doubled since the last one, so a
// cold start, whose garbage is every decoded watch event and response,
// peaks at twice the live heap
// (docs/measurements/benchmarks-memory-and-50000-bars.md, Memory). Two things
// bound that here:
//
//   - the heap may grow past what the last collection found live by
//     --gc-headroom-percent of it (GOGC's own rule, with another percent),
//     but by never less than MinHeadroom, so that a small controller does
//     not collect more often than Go would for memory nobody misses;
//   - without GOMEMLIMIT, the soft limit is 90 % of the container's memory
//     limit, so that the collector works harder near the limit instead of
//     the kernel killing the container at it. The limit is the smallest
//     of what the Pod says ($CONTAINER_MEMORY_LIMIT, which the shipped
//     manifests and chart fill from limits.memory through the Downward
//     API) and every cgroup v2 memory.max from the process's cgroup up to
//     the root of the hierarchy it sees.
//
// The manifests used to set GOMEMLIMIT to a literal, about 90 % of the
// limit beside it; the derivation here then never ran in a shipped
// install, and an operator who lowered limits.memory (to 512Mi, say) kept
// GOMEMLIMIT at 920MiB, above the limit: the collector never worked
// harder before the kernel killed the container. A GOMEMLIMIT that is
// set, to anything but the empty string, still wins.
//
// A lower percent costs CPU: the collector's work per collection is the
// live heap, and collections come more often. With a steady heap they
// come 100/percent times as often as with GOGC=100; through a cold start,
// whose live heap grows, what they mark in all grows as (1+g)/g with
// g = percent/100, three times GOGC=100's at 20 (test/bench/model's gc.go,
// fitted to make bench-gc).

// MinHeadroom is the least the heap may grow between collections.
const MinHeadroom = 32 << 20

// memoryLimitShare is the part of the container's memory limit given to
// the Go runtime's soft limit when GOMEMLIMIT is not set: the rest is for
// what the runtime does not count (the binary's text, kernel buffers for
// its sockets), so that a GOMEMLIMIT at the limit itself would leave the
// OOM killer the last word.
const memoryLimitShare = 0.9

// LimitEnv names the variable the manifests set to the container's memory
// limit in bytes, with a resourceFieldRef to limits.memory: the Downward
// API gives the whole limit (and can give nothing less), the binary takes
// memoryLimitShare of it. Read before the cgroup because a container that
// shares its host's cgroup namespace does not always see its own cgroup's
// files; the smaller of the two counts where both are there.
const LimitEnv = "CONTAINER_MEMORY_LIMIT"

// SoftLimit is the GOMEMLIMIT SetUp derives from a memory limit of limit
// bytes.
func SoftLimit(limit int64) int64 {
	return int64(float64(limit) * memoryLimitShare)
}

// SetUp applies the policy above. GOGC or GOMEMLIMIT in the
// environment take precedence over the part they set.
func SetUp(logger klog.Logger, headroomPercent int) {
	// The runtime treats an empty GOGC or GOMEMLIMIT as unset; so does this.
	if os.Getenv("GOMEMLIMIT") == "" {
		procSelfCgroup, _ := os.ReadFile("/proc/self/cgroup")
		limit, source, err := containerMemoryLimit(os.Getenv(LimitEnv), string(procSelfCgroup), "/sys/fs/cgroup")
		if err != nil {
			// A value the binary cannot read is the manifest's mistake:
			// say so, and go on with what the cgroup says.
			logger.Error(err, "Ignoring the container's memory limit from the environment", "variable", LimitEnv)
		}
		if limit > 0 {
			soft := SoftLimit(limit)
			debug.SetMemoryLimit(soft)
			logger.Info("Soft memory limit from the container's memory limit", "source", source, "limit", limit, "goMemLimit", soft)
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

// containerMemoryLimit is the smallest memory limit that applies to this
// process, in bytes, and where it was read (0 if none was found): fromEnv
// (LimitEnv's value, a quantity such as the Downward API's "536870912"),
// and the memory.max of the cgroup procSelfCgroup names and of each of its
// ancestors under root, the cgroup v2 mount. A Pod's limit can be on the
// Pod's cgroup rather than the container's (Pod-level resources), a
// systemd slice's on the slice, so the leaf alone is not enough; where the
// container has its own cgroup namespace, it sees only its own cgroup, at
// root itself. err reports a fromEnv that does not read, which is left
// out.
func containerMemoryLimit(fromEnv, procSelfCgroup, root string) (limit int64, source string, err error) {
	consider := func(n int64, from string) {
		if n > 0 && (limit == 0 || n < limit) {
			limit, source = n, from
		}
	}
	if fromEnv != "" {
		q, perr := resource.ParseQuantity(fromEnv)
		if perr != nil || q.Sign() <= 0 {
			err = fmt.Errorf("%s=%q is not a memory limit", LimitEnv, fromEnv)
		} else {
			consider(q.Value(), LimitEnv)
		}
	}
	dir := root
	if p, ok := cgroupV2Path(procSelfCgroup); ok {
		// A path that climbs out of the mount (a cgroup outside this
		// namespace's root) names nothing in it: read the root alone.
		if joined := path.Join(root, p); joined == root || strings.HasPrefix(joined, root+"/") {
			dir = joined
		}
	}
	for {
		file := path.Join(dir, "memory.max")
		if raw, rerr := os.ReadFile(file); rerr == nil {
			if n, ok := parseMemoryMax(string(raw)); ok {
				consider(n, file)
			}
		}
		if dir == root {
			return limit, source, err
		}
		dir = path.Dir(dir)
	}
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
