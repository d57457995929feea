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
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// A container that stops answering can be looked at from the host without
// its help: the kernel keeps, per thread, how long it ran and how long it
// waited for a CPU (schedstat), what it is blocked in (wchan, the kernel
// stack, the system call), and, per cgroup, how often the CFS quota
// throttled it, whether it is frozen, and how much memory pressure it met.
// Two samples a few seconds apart tell a process that is not given a CPU
// from one that sleeps, and a sleep in the kernel from one in itself.

// Sample is what the host read about a process at one moment.
type Sample struct {
	At  time.Time
	PID int
	// Cgroups maps each hierarchy's mount (e.g. /sys/fs/cgroup/cpu) to the
	// process's cgroup directory in it.
	Cgroups map[string]string
	// Files holds the cgroup and /proc files read, by path.
	Files   map[string]string
	Threads []Thread
	// Sockets are the TCP sockets of the process's network namespace.
	Sockets []Socket
	// Neighbors is the ARP table of the process's network namespace.
	Neighbors []Neighbor
	// Bridge is the Pods' bridge as this machine sees it.
	Bridge Bridge
}

// Neighbor is a line of /proc/<pid>/net/arp.
type Neighbor struct {
	IP, MAC, Device string
	// Complete is the ATF_COM flag: the entry is resolved and used.
	Complete bool
}

// Bridge is the Pods' bridge: its MAC, its addresses (the Pods' gateway
// and the Service IP), and the MACs of its ports (the host ends of the
// Pods' veths), any of which the bridge delivers to this machine.
type Bridge struct {
	MAC   string
	Addrs []string
	Ports map[string]string // port name: MAC
	// Neighbors are this machine's ARP entries on the bridge ("IP MAC
	// state"), FDB its forwarding database ("MAC port flags").
	Neighbors, FDB []string
}

// ReadBridge reads the bridge's MAC, addresses and ports.
func ReadBridge() Bridge {
	read := func(path string) string {
		b, _ := os.ReadFile(path)
		return strings.TrimSpace(string(b))
	}
	br := Bridge{MAC: read("/sys/class/net/" + bridgeName + "/address"), Ports: map[string]string{}}
	ports, _ := os.ReadDir("/sys/class/net/" + bridgeName + "/brif")
	for _, p := range ports {
		br.Ports[p.Name()] = read("/sys/class/net/" + p.Name() + "/address")
	}
	link, err := netlink.LinkByName(bridgeName)
	if err != nil {
		return br
	}
	addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
	for _, a := range addrs {
		br.Addrs = append(br.Addrs, a.IP.String())
	}
	neighbors, _ := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	for _, n := range neighbors {
		br.Neighbors = append(br.Neighbors, fmt.Sprintf("%s %s %s", n.IP, n.HardwareAddr, neighState(n.State)))
	}
	names := map[int]string{}
	links, _ := netlink.LinkList()
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	fdb, _ := netlink.NeighList(0, syscall.AF_BRIDGE)
	for _, n := range fdb {
		if n.MasterIndex == link.Attrs().Index || n.LinkIndex == link.Attrs().Index {
			br.FDB = append(br.FDB, fmt.Sprintf("%s %s flags %#x state %s", n.HardwareAddr, names[n.LinkIndex], n.Flags, neighState(n.State)))
		}
	}
	return br
}

// Thread is one thread's state. RunNs and WaitNs are the time it has run
// on a CPU and waited runnable on a run queue, from /proc/.../schedstat.
type Thread struct {
	TID                   int
	State                 string
	RunNs, WaitNs, Slices uint64
	Wchan, Syscall, Stack string
}

// Socket is a line of /proc/<pid>/net/tcp{,6}: for a listening socket
// RxQueue is how many connections wait to be accepted; for another, how
// many bytes have arrived unread.
type Socket struct {
	Local, Remote    string
	State            string
	TxQueue, RxQueue uint64
}

// cgroupFiles are read in each of the process's cgroups, where they exist.
var cgroupFiles = map[string][]string{
	"cpu":     {"cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat"},
	"cpuacct": {"cpuacct.usage"},
	"memory":  {"memory.usage_in_bytes", "memory.limit_in_bytes", "memory.failcnt", "memory.oom_control"},
	"freezer": {"freezer.state"},
	// On a hybrid host runc puts the container in the unified hierarchy
	// too, which has no controllers but keeps pressure (PSI) per cgroup.
	"unified": {"cpu.pressure", "memory.pressure", "io.pressure", "cpu.stat"},
}

// TakeSample reads what the host knows about pid. Files that cannot be
// read are left out; a process that is gone is an error.
func TakeSample(pid int) (*Sample, error) {
	proc := fmt.Sprintf("/proc/%d", pid)
	s := &Sample{At: time.Now(), PID: pid, Cgroups: map[string]string{}, Files: map[string]string{}}
	cg, err := os.ReadFile(proc + "/cgroup")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		// hierarchy-ID:controller-list:path
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		name := f[1]
		if name == "" {
			name = "unified"
		}
		if _, ok := cgroupFiles[name]; ok {
			s.Cgroups[name] = filepath.Join("/sys/fs/cgroup", name, f[2])
		}
	}
	for name, dir := range s.Cgroups {
		// The container's cgroup and every one above it: the Pod's has a
		// quota of its own, and each level's shares split the CPU with
		// its siblings.
		root := filepath.Join("/sys/fs/cgroup", name)
		for d := dir; strings.HasPrefix(d, root); d = filepath.Dir(d) {
			for _, file := range cgroupFiles[name] {
				if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
					s.Files[filepath.Join(d, file)] = strings.TrimSpace(string(b))
				}
			}
		}
	}
	// The process, and the machine around it: load and pressure.
	for _, path := range []string{proc + "/status", proc + "/sched", "/proc/loadavg", "/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io"} {
		if b, err := os.ReadFile(path); err == nil {
			s.Files[path] = strings.TrimSpace(string(b))
		}
	}
	tasks, err := os.ReadDir(proc + "/task")
	if err != nil {
		return nil, err
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		s.Threads = append(s.Threads, readThread(filepath.Join(proc, "task", task.Name()), tid))
	}
	if b, err := os.ReadFile(filepath.Join(proc, "net", "arp")); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
			// IP address, HW type, Flags, HW address, Mask, Device
			if f := strings.Fields(line); len(f) == 6 {
				flags, _ := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 32)
				s.Neighbors = append(s.Neighbors, Neighbor{IP: f[0], MAC: f[3], Device: f[5], Complete: flags&0x2 != 0})
			}
		}
	}
	s.Bridge = ReadBridge()
	for _, file := range []string{"tcp", "tcp6"} {
		if b, err := os.ReadFile(filepath.Join(proc, "net", file)); err == nil {
			s.Sockets = append(s.Sockets, parseSockets(string(b))...)
		}
	}
	return s, nil
}

func readThread(dir string, tid int) Thread {
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	t := Thread{TID: tid, Wchan: read("wchan"), Syscall: read("syscall"), Stack: read("stack")}
	// stat: "pid (comm) S ..."; comm may hold spaces and parentheses.
	if stat := read("stat"); strings.LastIndex(stat, ")") > 0 {
		if f := strings.Fields(stat[strings.LastIndex(stat, ")")+1:]); len(f) > 0 {
			t.State = f[0]
		}
	}
	if f := strings.Fields(read("schedstat")); len(f) == 3 {
		t.RunNs, _ = strconv.ParseUint(f[0], 10, 64)
		t.WaitNs, _ = strconv.ParseUint(f[1], 10, 64)
		t.Slices, _ = strconv.ParseUint(f[2], 10, 64)
	}
	return t
}

var tcpStates = map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
	"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}

func parseSockets(table string) []Socket {
	var out []Socket
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		tx, rx, _ := strings.Cut(f[4], ":")
		s := Socket{Local: hexAddr(f[1]), Remote: hexAddr(f[2]), State: tcpStates[f[3]]}
		s.TxQueue, _ = strconv.ParseUint(tx, 16, 64)
		s.RxQueue, _ = strconv.ParseUint(rx, 16, 64)
		out = append(out, s)
	}
	return out
}

// hexAddr turns /proc/net/tcp's "0100007F:1F90" into "127.0.0.1:8080".
// The kernel prints the address as 32-bit words in host byte order
// (little-endian here): one word for IPv4, four for IPv6.
func hexAddr(s string) string {
	ip, port, ok := strings.Cut(s, ":")
	p, err := strconv.ParseUint(port, 16, 16)
	raw, herr := hex.DecodeString(ip)
	if !ok || err != nil || herr != nil || len(raw)%4 != 0 {
		return s
	}
	for i := 0; i < len(raw); i += 4 {
		slices.Reverse(raw[i : i+4])
	}
	addr, ok := netip.AddrFromSlice(raw)
	if !ok {
		return s
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(p)).String()
}

// ContainerProcess returns the host PID of a container's main process,
// found by its cgroup (the kubelet names a container's cgroup after its
// ID) rather than by asking containerd, which may be what is stuck.
func ContainerProcess(containerID string) (int, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	var pid int
	err := filepath.WalkDir("/sys/fs/cgroup/pids/"+cgroupName, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() != id {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		// The first is the container's init: its main process (exec'd
		// processes join later).
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, err = strconv.Atoi(f[0])
			if err != nil {
				return err
			}
			return filepath.SkipAll
		}
		return nil
	})
	if err == nil && pid == 0 {
		err = fmt.Errorf("no process in a cgroup named %s", id)
	}
	return pid, err
}

// ContainerLogs returns the log files the node keeps of a Pod's container,
// oldest first: one per start, named after the restart count, the current
// one and the one before it (what kubectl logs --previous reads).
func (n *Node) ContainerLogs(namespace, pod, container string) []string {
	logs, _ := filepath.Glob(filepath.Join(podLogsDir, namespace+"_"+pod+"_*", container, "*.log"))
	slices.SortFunc(logs, func(a, b string) int {
		na, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(a), ".log"))
		nb, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(b), ".log"))
		return na - nb
	})
	return logs
}

// neighState names a neighbor entry's NUD state bits.
func neighState(state int) string {
	var out []string
	for bit, name := range map[int]string{netlink.NUD_INCOMPLETE: "INCOMPLETE", netlink.NUD_REACHABLE: "REACHABLE", netlink.NUD_STALE: "STALE",
		netlink.NUD_DELAY: "DELAY", netlink.NUD_PROBE: "PROBE", netlink.NUD_FAILED: "FAILED", netlink.NUD_NOARP: "NOARP", netlink.NUD_PERMANENT: "PERMANENT"} {
		if state&bit != 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "|")
}
