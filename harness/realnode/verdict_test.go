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
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTakeSampleReadsThreadsAndSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := TakeSample(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Threads) == 0 || s.Threads[0].State == "" {
		t.Fatalf("threads %+v", s.Threads)
	}
	var ran uint64
	for _, th := range s.Threads {
		ran += th.RunNs
	}
	if ran == 0 {
		t.Errorf("the threads of a running test ran 0 ns: schedstat not read")
	}
	var listening bool
	for _, sock := range s.Sockets {
		listening = listening || (sock.State == "LISTEN" && sock.Local == ln.Addr().String())
	}
	if !listening {
		t.Errorf("no LISTEN socket at %s among %+v", ln.Addr(), s.Sockets)
	}
}

func TestHexAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"0000000000000000FFFF00000A4D580A:1F91": "10.88.77.10:8081",
		"00000000000000000000000000000000:1F91": "[::]:8081",
		"B80D0120000000000000000001000000:01BB": "[2001:db8::1]:443",
	} {
		if got := hexAddr(in); got != want {
			t.Errorf("hexAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// sample is a process of one thread in a cgroup whose counters are given.
func sample(at time.Time, runMs, waitMs, throttledMs int, cpuPressureMs int, freezer string, state ...string) *Sample {
	ms := func(n int) string { return strconv.Itoa(n * 1e6) }
	return &Sample{
		At: at, PID: 42,
		Cgroups: map[string]string{"cpu": "/sys/fs/cgroup/cpu/x", "unified": "/sys/fs/cgroup/unified/x", "freezer": "/sys/fs/cgroup/freezer/x"},
		Files: map[string]string{
			"/sys/fs/cgroup/cpu/x/cpu.stat":            "nr_periods 10\nnr_throttled 1\nthrottled_time " + ms(throttledMs),
			"/sys/fs/cgroup/unified/x/cpu.pressure":    "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + strconv.Itoa(cpuPressureMs*1000) + "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0",
			"/sys/fs/cgroup/freezer/x/freezer.state":   freezer,
			"/sys/fs/cgroup/unified/x/memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0",
		},
		Threads: []Thread{{TID: 42, State: append(state, "S")[0], RunNs: uint64(runMs) * 1e6, WaitNs: uint64(waitMs) * 1e6}},
	}
}

func TestVerdictNamesTheCause(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(4 * time.Second)
	backlog := Socket{Local: "10.88.77.10:8081", State: "LISTEN", RxQueue: 3}
	stuck := Socket{Local: "10.88.77.16:48154", Remote: "10.0.0.1:443", State: "ESTABLISHED", TxQueue: 1048}
	for _, c := range []struct {
		name string
		a, b *Sample
		want string
	}{
		{"frozen", sample(t0, 5, 5, 0, 0, "THAWED"), sample(t1, 5, 5, 0, 0, "FROZEN"), "frozen by its freezer cgroup"},
		{"throttled", sample(t0, 5, 5, 0, 0, "THAWED"), sample(t1, 200, 5, 3000, 0, "THAWED"), "throttled by its CFS quota for 3s"},
		{"starved", sample(t0, 5, 5, 0, 0, "THAWED"), sample(t1, 50, 3500, 0, 3500, "THAWED"), "runnable but not given a CPU"},
		{"idle", sample(t0, 5, 5, 0, 0, "THAWED"), withSockets(sample(t1, 6, 6, 0, 0, "THAWED"), backlog), "idle: its threads ran 1ms"},
		{"held", sample(t0, 5, 5, 0, 0, "THAWED", "R"), sample(t1, 5, 5, 0, 0, "THAWED", "R"), "held off the CPU: 1 threads"},
		{"cut off", sample(t0, 5, 5, 0, 0, "THAWED"), withNeighbor(sample(t1, 6, 6, 0, 0, "THAWED"), "02:00:00:00:00:01"), "cut off from this machine: the Pod's ARP entries [10.88.77.1 at 02:00:00:00:00:01]"},
		{"reachable through a port", sample(t0, 5, 5, 0, 0, "THAWED"), withNeighbor(sample(t1, 6, 6, 0, 0, "THAWED"), "02:00:00:00:00:03"), "idle"},
		{"no network", withSockets(sample(t0, 5, 5, 0, 0, "THAWED"), stuck), withSockets(sample(t1, 6, 6, 0, 0, "THAWED"), stuck), "cut off from the network, not stuck itself"},
		{"a request just sent", sample(t0, 5, 5, 0, 0, "THAWED"), withSockets(sample(t1, 6, 6, 0, 0, "THAWED"), stuck), "idle"},
		{"busy", sample(t0, 5, 5, 0, 0, "THAWED"), sample(t1, 3905, 6, 0, 0, "THAWED"), "busy: its threads ran 3.9s"},
	} {
		verdict, figures := Verdict(c.a, c.b)
		if !strings.HasPrefix(verdict, c.want) {
			t.Errorf("%s: verdict %q, want it to start with %q\n%s", c.name, verdict, c.want, figures)
		}
		if c.name == "idle" && !strings.Contains(verdict, "10.88.77.10:8081: 3") {
			t.Errorf("idle: verdict %q does not name the 3 connections waiting at 10.88.77.10:8081", verdict)
		}
	}
}

func withSockets(s *Sample, sockets ...Socket) *Sample {
	s.Sockets = sockets
	return s
}

// withNeighbor gives the Pod an ARP entry for the gateway at mac, on a
// bridge whose MAC is 02:00:00:00:00:02 and whose one port has
// 02:00:00:00:00:03.
func withNeighbor(s *Sample, mac string) *Sample {
	s.Neighbors = []Neighbor{{IP: "10.88.77.1", MAC: mac, Device: "eth0", Complete: true}}
	s.Bridge = Bridge{MAC: "02:00:00:00:00:02", Addrs: []string{"10.88.77.1", "10.0.0.1"}, Ports: map[string]string{"veth1": "02:00:00:00:00:03"}}
	return s
}
