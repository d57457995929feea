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
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/realnode"
)

// A Bar's Pods on this node become available in about a second, yet a run
// once took 16-17 s, and nothing kept told why. Every run now logs when
// each of its Pods passed each stage; a slow one also logs its Events, the
// Lease, the controller's Pods and the lines of every component's log that
// concern it (the controller traces the tests' Bars), so a slow run
// explains itself in the test output.
//
// What the slow runs showed (docs/measurements/tests-and-real-node.md, "A real
// node"): the Pods and the Deployment were available within a second every
// time; the Bar's status waited for the controller. The leader's API calls
// stopped returning (a status apply never came back; "Failed to renew lease:
// context deadline exceeded" 10 s later), and the kubelet's probes of that Pod
// timed out over the same seconds, while the standby stayed healthy. The Bar,
// queued on the standby too, was synced the moment the standby took the Lease:
// when it expired, 15 s after the stalled leader's last renewal, plus up to one
// 2 s retry period. That is the 16-17 s.
//
// The watcher (watch_test.go) now samples a stalled controller Pod from
// the host. The one stall it caught (two replicas at once, while two new
// Pods' veths joined the bridge) was not the process: it sat in
// epoll_wait, ran 4 ms in 3 s and waited on no CPU, no connection of the
// probes reached its sockets, and its bytes to the API server stayed
// unacknowledged: the Pods' network path had stopped carrying packets.

// slowConverge is when a converge counts as slow.
const slowConverge = 5 * time.Second

// The tests' Bars live in namespaces named barNamespacePrefix and a random
// suffix, which barNamespaces (a --trace pattern) matches.
const (
	barNamespacePrefix = "bar-node-"
	barNamespaces      = barNamespacePrefix + "*"
)

// podStages logs, per Pod of ns, when it passed each stage, relative to
// start (the API server's times have whole seconds).
func podStages(t *testing.T, e *env, ns string, start time.Time) {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the Pods: %v", err)
		return
	}
	since := func(tm metav1.Time) string {
		if tm.IsZero() {
			return "-"
		}
		return tm.Sub(start).Round(time.Second).String()
	}
	for _, p := range pods.Items {
		stages := []string{"created " + since(p.CreationTimestamp)}
		for _, c := range p.Status.Conditions {
			stages = append(stages, fmt.Sprintf("%s=%s %s", c.Type, c.Status, since(c.LastTransitionTime)))
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				stages = append(stages, "container started "+since(c.State.Running.StartedAt))
			}
			stages = append(stages, fmt.Sprintf("restarts %d", c.RestartCount))
		}
		t.Logf("Pod %s: %s", p.Name, strings.Join(stages, ", "))
	}
}

// explainSlow logs what a slow converge of the Bars in ns left behind:
// the Events of ns, the Deployment's and ReplicaSets' status, and the
// lines about ns (and every warning and error) from start on in the logs
// of the kubelet, containerd, kube-controller-manager, kube-scheduler and
// the controller's Pods.
func explainSlow(t *testing.T, e *env, ns string, start time.Time) {
	t.Helper()
	ctx := t.Context()
	end := time.Now()
	t.Logf("=== slow converge in %s: what happened from %s on", ns, start.Format("15:04:05.000"))
	if events, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Logf("listing the Events: %v", err)
	} else {
		items := events.Items
		slices.SortFunc(items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
		for _, ev := range items {
			t.Logf("event %+.3fs %s %s %s/%s (%s, count %d): %s", eventTime(ev).Sub(start).Seconds(), ev.Type, ev.Reason,
				ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Source.Component+ev.ReportingController, max(ev.Count, 1), ev.Message)
		}
	}
	if bars, err := e.bars.BarcontrollerV1().Bars(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, b := range bars.Items {
			t.Logf("Bar %s: generation %d, status %+v", b.Name, b.Generation, b.Status)
		}
	}
	if deps, err := e.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range deps.Items {
			t.Logf("Deployment %s: generation %d, status %+v", d.Name, d.Generation, d.Status)
		}
	}
	if rss, err := e.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, rs := range rss.Items {
			t.Logf("ReplicaSet %s: created %s, status %+v", rs.Name, rs.CreationTimestamp.Format("15:04:05"), rs.Status)
		}
	}
	// The controller itself: a replica that restarted or a Lease that
	// changed hands stops the work until the standby takes over.
	if lease, err := e.kube.CoordinationV1().Leases(installNamespace).Get(ctx, "bar-controller", metav1.GetOptions{}); err == nil {
		t.Logf("Lease %s: holder %s, acquired %v, renewed %v, transitions %d", lease.Name, ptr.Deref(lease.Spec.HolderIdentity, ""),
			lease.Spec.AcquireTime, lease.Spec.RenewTime, ptr.Deref(lease.Spec.LeaseTransitions, 0))
	}
	// A controller Pod that stopped answering: what the host saw of it.
	for _, s := range e.watch.during(start.Add(-time.Minute), end) {
		t.Logf("stall: %s", &s)
	}
	if events, err := e.kube.CoreV1().Events(installNamespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range events.Items {
			if ev.Type != corev1.EventTypeNormal || !eventTime(ev).Before(start.Add(-time.Minute)) {
				t.Logf("event %+.3fs (last %+.3fs) %s %s %s/%s (count %d): %s", eventTime(ev).Sub(start).Seconds(), ev.LastTimestamp.Sub(start).Seconds(),
					ev.Type, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, max(ev.Count, 1), ev.Message)
			}
		}
	}
	logs := map[string]string{
		"kubelet":                 filepath.Join(e.node.LogDir, "kubelet.log"),
		"containerd":              filepath.Join(e.node.LogDir, "containerd.log"),
		"kube-controller-manager": filepath.Join(e.cluster.Dir, "logs", "kube-controller-manager.log"),
		"kube-scheduler":          filepath.Join(e.cluster.Dir, "logs", "kube-scheduler.log"),
	}
	for _, name := range []string{"kubelet", "containerd", "kube-controller-manager", "kube-scheduler"} {
		logExcerpt(t, name, logs[name], start, end, ns, installNamespace+"/")
	}
	pods, err := e.kube.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the controller's Pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			t.Logf("controller Pod %s: restarts %d, state %+v, last state %+v", p.Name, c.RestartCount, c.State, c.LastTerminationState)
		}
		for _, previous := range []bool{true, false} {
			args := []string{"logs", "--namespace", installNamespace, p.Name}
			name := "controller Pod " + p.Name
			if previous {
				if p.Status.ContainerStatuses[0].RestartCount == 0 {
					continue
				}
				args, name = append(args, "--previous"), name+", the container before the restart"
			}
			out, err := e.cluster.Kubectl(ctx, args...)
			if err != nil {
				t.Logf("kubectl %v: %v", args, err)
				continue
			}
			path := filepath.Join(e.dir, strings.ReplaceAll(name, " ", "_")+".log")
			if err := os.WriteFile(path, []byte(out), 0o644); err == nil {
				logExcerpt(t, name, path, start, end, ns, "lease", "Lease", "leader")
			}
		}
	}
	t.Logf("=== end of the slow converge in %s (logs under %s, kept if a test fails or a Pod stalls, or with BAR_KEEP_TEST_DIR=1; node: %s)", ns, e.dir, realnode.Name)
}

func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.FirstTimestamp.IsZero():
		return ev.FirstTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

var (
	// klog: "I1123 16:40:00.123456 ..."; containerd: time="2026-11-23T16:40:00.123456789Z".
	klogLine       = regexp.MustCompile(`^([IWEF])(\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)
	containerdLine = regexp.MustCompile(`^time="([^"]+)" level=(\w+)`)
)

// maxExcerpt bounds the lines kept from one log.
const maxExcerpt = 300

// logExcerpt logs the lines of the log at path written between start (less
// a minute: what led up to it) and end that contain one of terms or are
// warnings or errors.
func logExcerpt(t *testing.T, name, path string, start, end time.Time, terms ...string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Logf("%s: %v", name, err)
		return
	}
	defer f.Close()
	from := start.Add(-time.Minute)
	var kept []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		var at time.Time
		var severe bool
		if m := klogLine.FindStringSubmatch(line); m != nil {
			at, _ = time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", start.Year(), m[2]), time.Local)
			severe = m[1] != "I"
		} else if m := containerdLine.FindStringSubmatch(line); m != nil {
			at, _ = time.Parse(time.RFC3339Nano, m[1])
			severe = m[2] == "warning" || m[2] == "error" || m[2] == "fatal"
		} else {
			continue
		}
		if at.Before(from) || at.After(end) || !(severe || slices.ContainsFunc(terms, func(s string) bool { return strings.Contains(line, s) })) {
			continue
		}
		kept = append(kept, fmt.Sprintf("%+.3fs %s", at.Sub(start).Seconds(), line))
	}
	t.Logf("--- %s: %d lines with %q or warnings and errors", name, len(kept), terms)
	if len(kept) > maxExcerpt {
		t.Logf("(the last %d of them)", maxExcerpt)
		kept = kept[len(kept)-maxExcerpt:]
	}
	for _, l := range kept {
		t.Log(l)
	}
}
