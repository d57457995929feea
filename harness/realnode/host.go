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

package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// The node's footprint on the host has fixed names, so that a run that
// crashed (or was killed with the test binary) is found and removed by the
// next one before it starts.
const (
	// BaseDir holds everything the node writes that it can choose the
	// place of: containerd's root and state, the kubelet's root, Pod logs,
	// CNI configuration and IPAM data.
	BaseDir = "/var/lib/bar-realnode"
	// stateFile records what the host looked like before the node started;
	// it outlives BaseDir's removal until the host is restored.
	stateFile = BaseDir + ".host.json"
	// cgroupName is the kubelet's cgroupRoot, in every cgroup v1 hierarchy.
	cgroupName = "bar-realnode"
	// bridgeName is the Linux bridge the Pods' veths are plugged into.
	bridgeName = "bartest0"
)

// kernelTunables are the sysctls the kubelet sets at start
// (setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go, the
// names from k8s.io/component-helpers/node/util/sysctl), plus forwarding,
// which nothing here may turn on.
var kernelTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

// sharedPaths are places outside BaseDir that the kubelet, libcni or
// containerd 1.6 write to no matter how they are configured: container log
// symlinks, libcni's result cache, shim sockets, network namespace mounts.
var sharedPaths = []string{"/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns"}

// hostState is what the node may change, as it was before.
type hostState struct {
	Sysctls map[string]string `json:"sysctls"`
	// Entries lists, per shared path, the names it held; a path that did
	// not exist has no entry and is removed entirely.
	Entries map[string][]string `json:"entries"`
}

func readHostState() (*hostState, error) {
	s := &hostState{Sysctls: map[string]string{}, Entries: map[string][]string{}}
	for _, k := range kernelTunables {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, err
		}
		s.Sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, p := range sharedPaths {
		entries, err := os.ReadDir(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		s.Entries[p] = names
	}
	return s, nil
}

// Snapshot describes the host settings the node may touch, for a test to
// compare before and after: sysctls, shared paths and their entries,
// network links, mounts and cgroups whose names mention the node.
func Snapshot() (string, error) {
	s, err := readHostState()
	if err != nil {
		return "", err
	}
	links, err := netlink.LinkList()
	if err != nil {
		return "", err
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	mounts, err := mountsUnder("/")
	if err != nil {
		return "", err
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupName)
	out, err := json.MarshalIndent(map[string]any{"host": s, "links": names, "mounts": len(mounts), "cgroups": cgroups}, "", "  ")
	return string(out), err
}

// saveHostState records the host before any change, unless a crashed run
// already did: its record is the true "before".
func saveHostState() error {
	if _, err := os.Stat(stateFile); err == nil {
		return nil
	}
	s, err := readHostState()
	if err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(stateFile, b, 0o600)
}

// CleanUp removes what an earlier run that crashed left on this host; with
// nothing left, it changes nothing. Start calls it too; a test calls it
// first when it compares the host before and after.
func CleanUp() error {
	if os.Geteuid() != 0 {
		return nil // a non-root run never started a node
	}
	return cleanHost()
}

// cleanHost removes every trace of a node, running or crashed: it kills
// the node's processes (anything whose command line names BaseDir, and
// anything in its cgroups), unmounts what is mounted under BaseDir and the
// new network namespaces, removes the cgroups, the bridge and BaseDir, and
// puts the shared paths and sysctls back as saveHostState found them.
func cleanHost() error {
	var errs []error
	killNodeProcesses()
	// Before the network namespaces are unmounted: while their mounts hold
	// them, the Pods' veths are still on the bridge and found there.
	errs = append(errs, deleteBridge())
	b, err := os.ReadFile(stateFile)
	if errors.Is(err, os.ErrNotExist) {
		b = []byte(`{}`)
	} else if err != nil {
		return err
	}
	var s hostState
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %w", stateFile, err)
	}
	mounts, err := mountsUnder(BaseDir)
	errs = append(errs, err)
	if s.Entries != nil {
		// Namespaces that were there before are someone else's.
		old := s.Entries["/run/netns"]
		ns, _ := mountsUnder("/run/netns")
		for _, m := range ns {
			if !slices.Contains(old, filepath.Base(m)) {
				mounts = append(mounts, m)
			}
		}
	}
	// Deepest first, detached: a busy mount goes as soon as it is free.
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	errs = append(errs, removeCgroups())
	errs = append(errs, os.RemoveAll(BaseDir))
	if s.Entries != nil {
		for _, p := range sharedPaths {
			old, existed := s.Entries[p]
			if !existed {
				errs = append(errs, os.RemoveAll(p))
				continue
			}
			entries, _ := os.ReadDir(p)
			for _, e := range entries {
				if !slices.Contains(old, e.Name()) {
					errs = append(errs, os.RemoveAll(filepath.Join(p, e.Name())))
				}
			}
		}
	}
	for k, v := range s.Sysctls {
		errs = append(errs, os.WriteFile("/proc/sys/"+k, []byte(v), 0o644))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(stateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// deleteBridge deletes the Pods' veths and then the bridge. A veth would go
// by itself with its Pod's network namespace, but the kernel destroys
// namespaces asynchronously, so the host end can outlive this function (and
// a test's look at the host) by a moment; deleting it is immediate.
func deleteBridge() error {
	br, err := netlink.LinkByName(bridgeName)
	if err != nil {
		return nil // not there: nothing to do
	}
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			if err := netlink.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
				errs = append(errs, fmt.Errorf("deleting %s: %w", l.Attrs().Name, err))
			}
		}
	}
	return errors.Join(append(errs, netlink.LinkDel(br))...)
}

// killNodeProcesses SIGKILLs the node's processes until none is left: the
// kubelet, containerd and its shims name BaseDir on their command lines;
// the containers live in the node's cgroups.
func killNodeProcesses() {
	for range 50 {
		pids := nodePids()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nodePids() []int {
	self := os.Getpid()
	seen := map[int]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(string(cmdline), BaseDir+"/") {
			seen[pid] = true
		}
	}
	_ = filepath.WalkDir("/sys/fs/cgroup/pids/"+cgroupName, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != self {
				seen[pid] = true
			}
		}
		return nil
	})
	var pids []int
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// makeCgroups creates the kubelet's cgroupRoot in every hierarchy; the
// kubelet with the cgroupfs driver expects it to exist.
func makeCgroups() error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if err := os.MkdirAll(filepath.Join(h, cgroupName), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups, children first. A cgroup can
// be removed only with rmdir, and only once its processes are gone.
func removeCgroups() error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, cgroupName), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies lists the mounted cgroup hierarchies.
func cgroupHierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		// cgroup v1 hierarchies, and the unified (v2) one that a hybrid
		// host mounts beside them, where runc makes cgroups too.
		if ok && len(f) >= 5 && (strings.HasPrefix(post, "cgroup ") || strings.HasPrefix(post, "cgroup2 ")) {
			out = append(out, f[4])
		}
	}
	return out, nil
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if m := f[4]; m == dir || strings.HasPrefix(m, strings.TrimSuffix(dir, "/")+"/") {
			out = append(out, m)
		}
	}
	return out, nil
}
