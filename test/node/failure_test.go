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
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/barcontroller/bar-controller/harness/realnode"
)

// afterTest runs when each test ends. It logs the stalls the watcher saw
// during the test, and for a failed test keeps the node's account of it
// under the test directory (kept when a test fails, see env.stop): the
// kubelet's and containerd's logs of the test's time, a fresh pair of
// samples of each controller container, and, as the very last act, a
// goroutine dump of any container still stalled. The failure message
// names the directory and sums it up.
func (e *env) afterTest(t *testing.T, start time.Time) {
	end := time.Now()
	var stalled []string
	for _, s := range e.watch.during(start, end) {
		t.Logf("during this test: %s", &s)
		if s.end.IsZero() {
			stalled = append(stalled, s.pod)
		}
	}
	// The bridge keeps the MAC realnode gave it while Pods come and go; a
	// change strands every Pod that resolved the old one (the stall that
	// realnode.Verdict calls "cut off from this machine").
	for _, c := range e.watch.macChanges(start, end) {
		t.Errorf("the Pods' bridge changed its MAC to %s at %s (%d ports): Pods that resolved the old one cannot reach this machine", c.mac, c.at.Format("15:04:05.000"), c.ports)
	}
	if !t.Failed() {
		return
	}
	dir := filepath.Join(e.dir, "failures", strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("keeping the node's account of the failure: %v", err)
		return
	}
	from := start.Add(-30 * time.Second)
	for name, path := range map[string]string{
		"kubelet":    filepath.Join(e.node.LogDir, "kubelet.log"),
		"containerd": filepath.Join(e.node.LogDir, "containerd.log"),
	} {
		_ = os.WriteFile(filepath.Join(dir, name+".log"), []byte(logWindow(path, from, end, "")), 0o644)
	}
	summary := []string{fmt.Sprintf("kubelet.log and containerd.log from %s (30 s before the test) to its end", from.Format("15:04:05.000"))}
	for _, s := range e.watch.during(start, end) {
		summary = append(summary, s.String())
	}

	// Each controller container as it is now.
	// The test's context is done by now (Cleanup runs after it is canceled).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := e.kube.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bar-controller"})
	if err != nil {
		summary = append(summary, "listing the controller's Pods: "+err.Error())
		pods = &corev1.PodList{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	pids := map[string]int{}
	for _, p := range pods.Items {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			continue
		}
		wg.Go(func() {
			line := "controller Pod " + p.Name + " now: "
			pid, err := realnode.ContainerProcess(p.Status.ContainerStatuses[0].ContainerID)
			if err != nil {
				line += err.Error()
			} else {
				verdict, figures, err := sampleTwice(pid)
				if err != nil {
					verdict = err.Error()
				}
				file := filepath.Join(dir, p.Name+".txt")
				_ = os.WriteFile(file, []byte("verdict: "+verdict+"\n\n"+figures), 0o644)
				line += fmt.Sprintf("pid %d %s (%s)", pid, verdict, file)
			}
			mu.Lock()
			defer mu.Unlock()
			pids[p.Name] = pid
			summary = append(summary, line)
		})
	}
	wg.Wait()
	// Last: SIGQUIT ends the stalled process, after everything else read it.
	for _, pod := range stalled {
		if pid := pids[pod]; pid != 0 {
			summary = append(summary, fmt.Sprintf("controller Pod %s still stalled: goroutine dump in %s", pod, e.watch.dumpGoroutines(pod, pid)))
		}
	}
	t.Errorf("the node's account of this failure is in %s:\n  %s", dir, strings.Join(summary, "\n  "))
}

// logWindow returns the lines of the log at path written between from and
// to that contain term (every line for ""), with the untimed lines that
// follow a kept one (a multi-line message).
func logWindow(path string, from, to time.Time, term string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error() + "\n"
	}
	defer f.Close()
	var out strings.Builder
	keep := false
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if at, ok := lineTime(line, from.Year()); ok {
			keep = !at.Before(from) && !at.After(to) && strings.Contains(line, term)
		}
		if keep {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// lineTime reads the time of a klog or containerd log line.
func lineTime(line string, year int) (time.Time, bool) {
	if m := klogLine.FindStringSubmatch(line); m != nil {
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[2]), time.Local)
		return at, err == nil
	}
	if m := containerdLine.FindStringSubmatch(line); m != nil {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		return at, err == nil
	}
	return time.Time{}, false
}
