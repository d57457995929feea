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

package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/barcontroller/bar-controller/harness/realnode"
)

// A controller Pod on this node has now and then stopped answering
// anything for 10-40 s while idle (docs/measurements/tests-and-real-node.md, "A
// real node"): the kubelet's probes connect and time out awaiting headers, its
// Lease renewals stall, it logs nothing, and the liveness probe restarts it.
// Logs written afterwards cannot say why; the host can, while it lasts. The
// watcher probes every controller container as the kubelet does, more often,
// and the first time one times out it samples the process from the host twice,
// sampleGap apart (realnode.TakeSample, realnode.Verdict: CPU run and wait per
// thread, CFS throttling, PSI, the freezer, memory, kernel stacks, unread
// requests), and writes it all under the test's directory, with the kubelet's
// lines about the Pod.

const (
	// probePeriod is how often each controller container is probed; the
	// kubelet's readiness probe does it every 5 s.
	probePeriod = time.Second
	// probeTimeout is the kubelet's (timeoutSeconds in artifacts/install):
	// a container that misses it fails the kubelet's probe too.
	probeTimeout = 2 * time.Second
	// sampleGap separates the two samples of a stalled process.
	sampleGap = 3 * time.Second
	// healthPort is the controller's probe port (--health-probe-bind-address).
	healthPort = "8081"
	// stallDumpEnv, when set, makes the watcher send a stalled container
	// SIGQUIT once it has sampled it, for the Go runtime's dump of every
	// goroutine (to stderr, so in the container's log, kept beside the
	// evidence). It kills the container, so it is for hunting the cause,
	// not for a run that should pass; a failed test does it anyway, last.
	stallDumpEnv = "BAR_NODE_STALL_DUMP"
)

// stall is one controller container that stopped answering.
type stall struct {
	pod, container string
	pid            int
	// start is when the first probe that timed out was sent; end when one
	// was answered again, or the container or its Pod went (zero: not yet).
	start, end time.Time
	how        string // how it ended
	verdict    string
	file, dump string
}

func (s *stall) String() string {
	lasted := "still stalled"
	if !s.end.IsZero() {
		lasted = fmt.Sprintf("%s after %v", s.how, s.end.Sub(s.start).Round(100*time.Millisecond))
	}
	out := fmt.Sprintf("controller Pod %s (container %.12s, pid %d) stopped answering probes at %s (%s): %s; evidence in %s",
		s.pod, strings.TrimPrefix(s.container, "containerd://"), s.pid, s.start.Format("15:04:05.000"), lasted, s.verdict, s.file)
	if s.dump != "" {
		out += "; goroutine dump in " + s.dump
	}
	return out
}

type macChange struct {
	at    time.Time
	mac   string
	ports int
}

// macsSince lists the bridge's MAC changes from t on.
func (w *watcher) macsSince(t time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out strings.Builder
	for _, c := range w.macs {
		if !c.at.Before(t) {
			fmt.Fprintf(&out, "%s bridge MAC %s (%d ports)\n", c.at.Format("15:04:05.000"), c.mac, c.ports)
		}
	}
	return out.String()
}

// macChanges returns the changes of the bridge's MAC in [from, to], not
// counting the first one seen.
func (w *watcher) macChanges(from, to time.Time) []macChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []macChange
	for i, c := range w.macs {
		if i > 0 && !c.at.Before(from) && !c.at.After(to) {
			out = append(out, c)
		}
	}
	return out
}

// watcher follows the controller's containers until stopped.
type watcher struct {
	e      *env
	dir    string
	client *http.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	stalls []*stall
	// macs records when the Pods' bridge took which MAC: a Pod whose ARP
	// entry names an old one cannot reach this machine (realnode.Verdict).
	macs    []macChange
	open    map[string]*stall // by container ID
	probing map[string]bool
}

func startWatcher(e *env) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{
		e: e, dir: filepath.Join(e.dir, "stalls"), cancel: cancel, done: make(chan struct{}),
		open: map[string]*stall{}, probing: map[string]bool{},
		// Like the kubelet's prober: a new connection each time, no proxy.
		client: &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
	return w
}

func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

func (w *watcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		br := realnode.ReadBridge()
		w.mu.Lock()
		if n := len(w.macs); br.MAC != "" && (n == 0 || w.macs[n-1].mac != br.MAC) {
			w.macs = append(w.macs, macChange{at: time.Now(), mac: br.MAC, ports: len(br.Ports)})
		}
		w.mu.Unlock()
		pods, err := w.e.kube.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bar-controller"})
		if err == nil {
			running := map[string]bool{}
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil || p.Status.PodIP == "" || len(p.Status.ContainerStatuses) == 0 {
					continue
				}
				cs := p.Status.ContainerStatuses[0]
				if cs.State.Running == nil || cs.ContainerID == "" {
					continue
				}
				running[cs.ContainerID] = true
				w.mu.Lock()
				busy := w.probing[cs.ContainerID]
				w.probing[cs.ContainerID] = true
				w.mu.Unlock()
				if !busy {
					wg.Go(func() { w.probe(ctx, p.Name, p.Status.PodIP, cs.ContainerID) })
				}
			}
			// A stalled container that was restarted, or whose Pod is
			// going, has ended its stall one way or another.
			w.mu.Lock()
			for id, s := range w.open {
				if !running[id] {
					s.end, s.how = time.Now(), "container restarted or Pod deleted"
					delete(w.open, id)
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(probePeriod):
		}
	}
}

func (w *watcher) probe(ctx context.Context, pod, ip, container string) {
	defer func() {
		w.mu.Lock()
		delete(w.probing, container)
		w.mu.Unlock()
	}()
	sent := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, healthPort)+"/readyz", nil)
	if err != nil {
		return
	}
	resp, err := w.client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var ne net.Error
	timedOut := err != nil && errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.open[container]
	switch {
	case err == nil && s != nil:
		// Any answer, 503 too: the process is back.
		s.end, s.how = time.Now(), "answered again"
		delete(w.open, container)
	case timedOut && s == nil:
		s = &stall{pod: pod, container: container, start: sent}
		w.open[container] = s
		w.stalls = append(w.stalls, s)
		go w.investigate(s)
	}
}

// investigate samples a stalled container's process and writes what the
// host saw. It runs once per stall, while the stall lasts.
func (w *watcher) investigate(s *stall) {
	pid, err := realnode.ContainerProcess(s.container)
	var verdict, figures string
	if err == nil {
		verdict, figures, err = sampleTwice(pid)
	}
	if err != nil {
		verdict = "not sampled: " + err.Error()
	}
	_ = os.MkdirAll(w.dir, 0o755)
	file := filepath.Join(w.dir, fmt.Sprintf("%s-%s.txt", s.pod, s.start.Format("150405.000")))
	var b strings.Builder
	fmt.Fprintf(&b, "controller Pod %s, container %s, pid %d: a probe sent at %s timed out after %v\nverdict: %s\n\n%s\n",
		s.pod, s.container, pid, s.start.Format("15:04:05.000"), probeTimeout, verdict, figures)
	fmt.Fprintf(&b, "--- the bridge's MAC from a minute before (checked every %v)\n%s", probePeriod, w.macsSince(s.start.Add(-time.Minute)))
	fmt.Fprintf(&b, "--- kubelet lines about %s from 30 s before\n", s.pod)
	b.WriteString(logWindow(filepath.Join(w.e.node.LogDir, "kubelet.log"), s.start.Add(-30*time.Second), time.Now(), s.pod))
	_ = os.WriteFile(file, []byte(b.String()), 0o644)
	w.mu.Lock()
	s.pid, s.verdict, s.file = pid, verdict, file
	w.mu.Unlock()
	if os.Getenv(stallDumpEnv) != "" && pid != 0 {
		dump := w.dumpGoroutines(s.pod, pid)
		w.mu.Lock()
		s.dump = dump
		w.mu.Unlock()
	}
}

// sampleTwice samples pid, waits sampleGap, samples again, and judges.
func sampleTwice(pid int) (string, string, error) {
	a, err := realnode.TakeSample(pid)
	if err != nil {
		return "", "", err
	}
	time.Sleep(sampleGap)
	b, err := realnode.TakeSample(pid)
	if err != nil {
		return "", "", err
	}
	verdict, figures := realnode.Verdict(a, b)
	return verdict, figures, nil
}

// dumpGoroutines sends pid SIGQUIT, waits for it to exit, and copies the
// container's log, which then ends with the Go runtime's dump of every
// goroutine, next to the evidence. It returns the copy's path.
func (w *watcher) dumpGoroutines(pod string, pid int) string {
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return "SIGQUIT: " + err.Error()
	}
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // containerd copies the last lines
	logs := w.e.node.ContainerLogs(installNamespace, pod, "bar-controller")
	if len(logs) == 0 {
		return "no container log found"
	}
	// The log of the container that got SIGQUIT: the newest at the time
	// of the signal, unless the kubelet already started the next one.
	var out strings.Builder
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), "SIGQUIT") {
			out.Write(b)
		}
	}
	path := filepath.Join(w.dir, fmt.Sprintf("%s-%s.goroutines.log", pod, time.Now().Format("150405.000")))
	_ = os.MkdirAll(w.dir, 0o755)
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		return err.Error()
	}
	return path
}

// during returns the stalls that overlap [from, to].
func (w *watcher) during(from, to time.Time) []stall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []stall
	for _, s := range w.stalls {
		if s.start.Before(to) && (s.end.IsZero() || s.end.After(from)) {
			out = append(out, *s)
		}
	}
	return out
}
