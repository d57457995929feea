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

package memory

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

func TestParseMemoryMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1073741824\n", 1 << 30, true},
		{"268435456", 256 << 20, true},
		{"max\n", 0, false}, // no limit
		{"", 0, false},
		{"0\n", 0, false},
		{"-1\n", 0, false},
		{"12abc\n", 0, false},
	} {
		got, ok := parseMemoryMax(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseMemoryMax(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCgroupV2Path(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		// A container with its own cgroup namespace sees itself at the root.
		{"0::/\n", "/", true},
		{"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-1a2b.scope\n",
			"/kubepods.slice/kubepods-burstable.slice/cri-containerd-1a2b.scope", true},
		// Hybrid: v1 controllers beside the unified hierarchy.
		{"12:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n", "/docker/abc", true},
		// v1 only: no unified line, no v2 limit to read.
		{"4:memory:/process_api/x\n1:cpu:/\n", "", false},
		{"", "", false},
	} {
		got, ok := cgroupV2Path(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("cgroupV2Path(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name     string
		live     uint64
		percent  int
		headroom uint64
		want     int
	}{
		// Large heaps: the percent asked for.
		{"50,000 Bars", 350 * mib, 50, 32 * mib, 50},
		{"5,000 Bars at 40 %", 100 * mib, 40, 32 * mib, 40},
		// Small heaps: the minimum headroom, so at most Go's default.
		{"between", 40 * mib, 50, 32 * mib, 80},
		{"5,000 Bars", 35 * mib, 50, 32 * mib, 100},
		{"empty", 4 * mib, 50, 32 * mib, 100},
		{"before the first collection", 0, 50, 32 * mib, 50},
		// Asked for more than Go's default: given.
		{"generous", 350 * mib, 200, 32 * mib, 200},
		{"generous, small", 4 * mib, 200, 32 * mib, 200},
		// Steps of 10, rounded up (never less headroom than asked).
		{"rounded", 350 * mib, 33, 32 * mib, 40},
	} {
		if got := GCPercent(tc.live, tc.percent, tc.headroom); got != tc.want {
			t.Errorf("%s: GCPercent(%d MiB, %d, %d MiB) = %d, want %d", tc.name, tc.live/mib, tc.percent, tc.headroom/mib, got, tc.want)
		}
	}
}

// TestGCTunerSetsGOGC: armed, the tuner sets GOGC after a collection, and
// again after the next one (it re-arms), from the live heap.
func TestGCTunerSetsGOGC(t *testing.T) {
	restore := debug.SetGCPercent(100)
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	waitFor := func(want uint64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			runtime.GC()
			metrics.Read(gogc)
			if got := gogc[0].Value.Uint64(); got == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("GOGC %d, want %d", got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	tuner := &gcTuner{percent: 30, current: 100}
	// Stopped before GOGC is restored: the restore is the last word.
	defer debug.SetGCPercent(restore)
	defer tuner.stop()
	tuner.arm()
	waitFor(30)
	// Set from outside; the tuner, which believes it set 30, does not
	// notice. A headroom of a petabyte makes it want Go's default again.
	debug.SetGCPercent(70)
	tuner.minHeadroom.Store(1 << 50)
	waitFor(100)
}

// TestGCTunerStopWaitsForATuneUnderWay: a tune the finalizer goroutine
// has begun when stop is called ends before stop returns, so that what
// is set after stop (a test's restore of GOGC) is never overwritten by
// the tuner. Before, stop only kept the next collection from tuning, and
// a tune under way set GOGC after the restore, leaking it into the tests
// that followed.
func TestGCTunerStopWaitsForATuneUnderWay(t *testing.T) {
	restore := debug.SetGCPercent(100)
	defer debug.SetGCPercent(restore)
	entered, release, tuned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	tuner := &gcTuner{percent: 30, current: 100, setGCPercent: func(p int) int {
		// The first tune holds here, where it is about to set GOGC,
		// until the test lets it go on.
		first := false
		once.Do(func() {
			first = true
			close(entered)
			<-release
		})
		old := debug.SetGCPercent(p)
		if first {
			close(tuned)
		}
		return old
	}}
	tuner.arm()
	for waiting := true; waiting; {
		runtime.GC()
		select {
		case <-entered:
			waiting = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	stopped := make(chan struct{})
	go func() {
		tuner.stop()
		debug.SetGCPercent(100) // what the test restores once the tuner is stopped
		close(stopped)
	}()
	// stop must wait for the tune under way; give it the time to return
	// if it does not, then let the tune set its GOGC.
	select {
	case <-stopped:
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-stopped
	<-tuned
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC %d after stop and the restore, want the restored 100: the tuner set it after it was stopped", got)
	}
}

// TestContainerMemoryLimit: the smallest of the limit the Pod gives in the
// environment and every memory.max from the process's cgroup up to the
// mount, with where it was read.
func TestContainerMemoryLimit(t *testing.T) {
	root := t.TempDir()
	const leaf = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-1a2b.scope"
	write := func(dir, max string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "memory.max"), []byte(max+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("/kubepods.slice", "8589934592")                    // the node's allocatable, 8Gi
	write("/kubepods.slice/kubepods-pod1.slice", "536870912") // Pod-level limit, 512Mi
	write(leaf, "max")                                        // no container limit of its own
	procSelfCgroup := "0::" + leaf + "\n"
	for _, tc := range []struct {
		name, env, cgroup string
		want              int64
		wantSource        string
		wantErr           bool
	}{
		{"an ancestor's limit, the leaf has none", "", procSelfCgroup, 512 << 20, filepath.Join(root, "/kubepods.slice/kubepods-pod1.slice/memory.max"), false},
		{"the Downward API's, smaller", "268435456", procSelfCgroup, 256 << 20, LimitEnv, false},
		{"a quantity in the environment", "256Mi", procSelfCgroup, 256 << 20, LimitEnv, false},
		{"the cgroup's, smaller than the environment's", "1073741824", procSelfCgroup, 512 << 20, filepath.Join(root, "/kubepods.slice/kubepods-pod1.slice/memory.max"), false},
		{"an unreadable environment: the cgroup's", "lots", procSelfCgroup, 512 << 20, filepath.Join(root, "/kubepods.slice/kubepods-pod1.slice/memory.max"), true},
		{"the environment alone (no cgroup v2)", "268435456", "4:memory:/x\n", 256 << 20, LimitEnv, false},
		{"nothing anywhere", "", "4:memory:/x\n", 0, "", false},
		// A path that climbs out of the mount reads the mount's root alone.
		{"a path out of the mount", "", "0::/../../etc\n", 0, "", false},
	} {
		got, source, err := containerMemoryLimit(tc.env, tc.cgroup, root)
		if got != tc.want || source != tc.wantSource || (err != nil) != tc.wantErr {
			t.Errorf("%s: %d from %q (error %v); want %d from %q (error %v)", tc.name, got, source, err, tc.want, tc.wantSource, tc.wantErr)
		}
	}
	// With its own cgroup namespace the container sees its cgroup at the
	// mount's root.
	own := t.TempDir()
	if err := os.WriteFile(filepath.Join(own, "memory.max"), []byte("134217728\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := containerMemoryLimit("", "0::/\n", own); got != 128<<20 {
		t.Errorf("own cgroup namespace: %d, want %d", got, 128<<20)
	}
}

// TestSetUpDerivesGOMEMLIMITFromTheContainersLimit: without GOMEMLIMIT,
// SetUp sets the soft limit to 90 % of the limit the Pod gives it through
// the Downward API (what the shipped manifests do); with GOMEMLIMIT set,
// it leaves the runtime's. Before, the binary read the leaf cgroup alone,
// and the manifests set a literal GOMEMLIMIT that did not follow the limit.
func TestSetUpDerivesGOMEMLIMITFromTheContainersLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const limit = 512 << 20
	want := int64(limit) * 9 / 10
	// The test's own cgroup may be smaller still (a CI container's):
	// then that is the limit that counts.
	procSelfCgroup, _ := os.ReadFile("/proc/self/cgroup")
	if own, _, _ := containerMemoryLimit("", string(procSelfCgroup), "/sys/fs/cgroup"); own > 0 && own < limit {
		want = SoftLimit(own)
	}
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv(LimitEnv, "536870912")
	debug.SetMemoryLimit(math.MaxInt64)
	SetUp(klog.Background(), 0)
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Errorf("GOMEMLIMIT %d after SetUp with %s=%d, want %d (90 %%)", got, LimitEnv, limit, want)
	}

	t.Setenv("GOMEMLIMIT", "920MiB") // the runtime read it at start; SetUp must not override what it set
	debug.SetMemoryLimit(920 << 20)
	SetUp(klog.Background(), 0)
	if got := debug.SetMemoryLimit(-1); got != 920<<20 {
		t.Errorf("GOMEMLIMIT %d after SetUp with GOMEMLIMIT=920MiB, want it left at %d", got, 920<<20)
	}
}
