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
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// share is the part of the interval between two samples past which a
// cause counts: a quarter. A process that answers nothing for seconds
// while it waited for a CPU, was throttled or stalled on memory for a
// quarter of them has its cause; an idle process waits for none of these.
const share = 4

// Verdict says, from two samples of one process taken apart, why it did
// not answer in between, in one line, and gives the figures behind it.
func Verdict(a, b *Sample) (string, string) {
	interval := b.At.Sub(a.At)
	var w strings.Builder
	fmt.Fprintf(&w, "pid %d, samples %s and %s (%v apart)\n", b.PID, a.At.Format("15:04:05.000"), b.At.Format("15:04:05.000"), interval.Round(time.Millisecond))

	// Per thread: what it ran and waited for a CPU between the samples.
	before := map[int]Thread{}
	for _, t := range a.Threads {
		before[t.TID] = t
	}
	var ran, waited time.Duration
	states := map[string]int{}
	var blocked []string
	// Threads runnable in both samples that neither ran nor waited on a
	// run queue in between are held off it: a CFS quota throttles by
	// taking tasks off the run queue.
	held := 0
	for _, t := range b.Threads {
		p, seen := before[t.TID]
		r := time.Duration(t.RunNs - min(p.RunNs, t.RunNs))
		q := time.Duration(t.WaitNs - min(p.WaitNs, t.WaitNs))
		ran += r
		waited += q
		states[t.State]++
		if t.State == "D" {
			blocked = append(blocked, fmt.Sprintf("%d in %s", t.TID, t.Wchan))
		}
		if seen && t.State == "R" && p.State == "R" && r+q < interval/100 {
			held++
		}
	}
	fmt.Fprintf(&w, "threads %d, states %v; between the samples they ran %v and waited runnable for a CPU %v\n",
		len(b.Threads), states, ran.Round(time.Millisecond), waited.Round(time.Millisecond))

	// Per cgroup level: throttling by a CFS quota, PSI, the freezer.
	var throttled, cpuPressure, memPressure time.Duration
	frozen := ""
	for _, path := range slices.Sorted(maps.Keys(b.Files)) {
		now, was := b.Files[path], a.Files[path]
		switch filepath.Base(path) {
		case "loadavg":
			fmt.Fprintf(&w, "%s: %s\n", path, now)
		case "cpu", "memory", "io":
			// The machine's pressure: how much of the time some task waited.
			some := time.Duration(pressureTotal(now, "some")-pressureTotal(was, "some")) * time.Microsecond
			fmt.Fprintf(&w, "%s: some %v\n", path, some.Round(time.Millisecond))
		case "cpu.stat":
			if strings.Contains(path, "/unified/") {
				fmt.Fprintf(&w, "%s: %s\n", path, strings.ReplaceAll(now, "\n", "; "))
				continue
			}
			n := counter(now, "nr_throttled") - counter(was, "nr_throttled")
			d := time.Duration(counter(now, "throttled_time") - counter(was, "throttled_time"))
			throttled = max(throttled, d)
			fmt.Fprintf(&w, "%s: throttled %d times for %v (periods %d)\n", path, n, d.Round(time.Millisecond),
				counter(now, "nr_periods")-counter(was, "nr_periods"))
		case "cpu.pressure", "memory.pressure", "io.pressure":
			some := time.Duration(pressureTotal(now, "some")-pressureTotal(was, "some")) * time.Microsecond
			full := time.Duration(pressureTotal(now, "full")-pressureTotal(was, "full")) * time.Microsecond
			fmt.Fprintf(&w, "%s: some %v, full %v\n", path, some.Round(time.Millisecond), full.Round(time.Millisecond))
			if filepath.Base(path) == "cpu.pressure" && path == filepath.Join(b.Cgroups["unified"], "cpu.pressure") {
				cpuPressure = some
			}
			if filepath.Base(path) == "memory.pressure" && path == filepath.Join(b.Cgroups["unified"], "memory.pressure") {
				memPressure = some
			}
		case "freezer.state":
			if now != "THAWED" {
				frozen = path + " " + now
			}
			fallthrough
		default:
			if strings.HasPrefix(path, "/sys/") {
				fmt.Fprintf(&w, "%s: %s\n", path, strings.ReplaceAll(now, "\n", "; "))
			}
		}
	}

	// Requests that reached the process's sockets and were not read.
	// And what it sent that was not acknowledged: with nothing unread, a
	// network that does not carry its packets.
	var unaccepted, unread, unacked []string
	halfOpen := 0
	for _, s := range b.Sockets {
		switch {
		case s.State == "LISTEN" && s.RxQueue > 0:
			unaccepted = append(unaccepted, fmt.Sprintf("%s: %d", s.Local, s.RxQueue))
		case s.State != "LISTEN" && s.RxQueue > 0:
			unread = append(unread, fmt.Sprintf("%s<-%s: %d bytes", s.Local, s.Remote, s.RxQueue))
		}
		// Unacknowledged in both samples: not a request just sent.
		if s.State != "LISTEN" && s.TxQueue > 0 && slices.ContainsFunc(a.Sockets, func(o Socket) bool {
			return o.Local == s.Local && o.Remote == s.Remote && o.TxQueue > 0
		}) {
			unacked = append(unacked, fmt.Sprintf("%s->%s: %d bytes", s.Local, s.Remote, s.TxQueue))
		}
		if s.State == "SYN_RECV" {
			halfOpen++
		}
	}
	fmt.Fprintf(&w, "connections not accepted: %v; bytes arrived unread: %v; bytes sent unacknowledged: %v; connections half open (SYN_RECV): %d\n",
		unaccepted, unread, unacked, halfOpen)
	// A Pod reaches this machine through the bridge's MAC: an ARP entry
	// for the bridge's address that names a MAC the bridge no longer has,
	// on itself or a port, sends the Pod's packets nowhere.
	var lost []string
	fmt.Fprintf(&w, "bridge %s: MAC %s, addresses %v, ports %v\n", bridgeName, b.Bridge.MAC, b.Bridge.Addrs, b.Bridge.Ports)
	fmt.Fprintf(&w, "  this machine's ARP entries on it: %q\n  its forwarding database: %q\n", b.Bridge.Neighbors, b.Bridge.FDB)
	for _, n := range b.Neighbors {
		fmt.Fprintf(&w, "  the Pod's ARP entry: %s at %s on %s (complete %v)\n", n.IP, n.MAC, n.Device, n.Complete)
		if n.Complete && slices.Contains(b.Bridge.Addrs, n.IP) && n.MAC != b.Bridge.MAC && !slices.Contains(slices.Collect(maps.Values(b.Bridge.Ports)), n.MAC) {
			lost = append(lost, fmt.Sprintf("%s at %s", n.IP, n.MAC))
		}
	}
	quiet := map[string]int{}
	for _, s := range b.Sockets {
		if s.State != "LISTEN" && s.RxQueue == 0 && s.TxQueue == 0 {
			quiet[s.State]++
			continue
		}
		fmt.Fprintf(&w, "  tcp %s %s -> %s tx %d rx %d\n", s.State, s.Local, s.Remote, s.TxQueue, s.RxQueue)
	}
	fmt.Fprintf(&w, "  and TCP sockets with empty queues, by state: %v\n", quiet)
	for _, t := range b.Threads {
		p := before[t.TID]
		fmt.Fprintf(&w, "thread %d %s (was %s) ran %v waited %v, wchan %s, syscall %s\n  %s\n", t.TID, t.State, p.State,
			time.Duration(t.RunNs-min(p.RunNs, t.RunNs)).Round(time.Microsecond), time.Duration(t.WaitNs-min(p.WaitNs, t.WaitNs)).Round(time.Microsecond),
			t.Wchan, t.Syscall, strings.ReplaceAll(t.Stack, "\n", "\n  "))
	}
	for _, f := range []string{"status", "sched"} {
		fmt.Fprintf(&w, "--- /proc/%d/%s\n%s\n", b.PID, f, b.Files[fmt.Sprintf("/proc/%d/%s", b.PID, f)])
	}

	quarter := interval / share
	var verdict string
	switch {
	case frozen != "":
		verdict = "frozen by its freezer cgroup (" + frozen + ")"
	case states["T"]+states["t"] > 0:
		verdict = "stopped by a signal or a tracer"
	case throttled >= quarter:
		verdict = fmt.Sprintf("throttled by its CFS quota for %v of %v", throttled.Round(time.Millisecond), interval.Round(time.Millisecond))
	case held > 0 && ran < quarter:
		verdict = fmt.Sprintf("held off the CPU: %d threads runnable in both samples neither ran nor waited on a run queue in %v (throttled %v)",
			held, interval.Round(time.Millisecond), throttled.Round(time.Millisecond))
	case waited >= quarter || cpuPressure >= quarter:
		verdict = fmt.Sprintf("runnable but not given a CPU: its threads waited %v (cpu.pressure some %v) and ran %v in %v",
			waited.Round(time.Millisecond), cpuPressure.Round(time.Millisecond), ran.Round(time.Millisecond), interval.Round(time.Millisecond))
	case memPressure >= quarter:
		verdict = fmt.Sprintf("stalled on memory for %v of %v", memPressure.Round(time.Millisecond), interval.Round(time.Millisecond))
	case len(lost) > 0:
		verdict = fmt.Sprintf("cut off from this machine: the Pod's ARP entries %v name a MAC that bridge %s no longer has (its MAC is %s, none of its ports has it): "+
			"the bridge took another MAC when the port holding the lowest one went, and the Pod's packets to this machine go nowhere until the entries expire (ran %v in %v)",
			lost, bridgeName, b.Bridge.MAC, ran.Round(time.Millisecond), interval.Round(time.Millisecond))
	case len(blocked) > 0:
		verdict = "blocked in the kernel: " + strings.Join(blocked, ", ")
	case ran < quarter && len(unaccepted) == 0 && len(unread) == 0 && len(unacked) > 0:
		// What one stall on the test node looked like: the process waits
		// for the network, and the network brings nothing either way.
		var arp []string
		for _, n := range b.Neighbors {
			arp = append(arp, n.IP+" at "+n.MAC)
		}
		verdict = fmt.Sprintf("cut off from the network, not stuck itself: its threads ran %v and waited %v for a CPU in %v, idle; no connection reached its sockets "+
			"(none waiting to be accepted, %d half open) and what it sent is unacknowledged (%v); its ARP entries %v, bridge %s MAC %s",
			ran.Round(time.Millisecond), waited.Round(time.Millisecond), interval.Round(time.Millisecond), halfOpen, unacked, arp, bridgeName, b.Bridge.MAC)
	case ran < quarter:
		verdict = fmt.Sprintf("idle: its threads ran %v and waited %v for a CPU in %v, none blocked in the kernel; connections not accepted %v, bytes unread %v, bytes sent unacknowledged %v, half open %d",
			ran.Round(time.Millisecond), waited.Round(time.Millisecond), interval.Round(time.Millisecond), unaccepted, unread, unacked, halfOpen)
	default:
		verdict = fmt.Sprintf("busy: its threads ran %v in %v", ran.Round(time.Millisecond), interval.Round(time.Millisecond))
	}
	return verdict, w.String()
}

// counter reads "name value" from a cgroup v1 stat file.
func counter(content, name string) uint64 {
	for _, line := range strings.Split(content, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// pressureTotal reads total= (microseconds) of the "some" or "full" line
// of a PSI file.
func pressureTotal(content, kind string) uint64 {
	for _, line := range strings.Split(content, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != kind {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "total="); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				return n
			}
		}
	}
	return 0
}
