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

package faults

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/shards"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// The sharded cases' shape, the issue's: 3 replicas, 6 shards.
const (
	shardCount = 6
	shardGate  = "--feature-gates=ShardedListAndWatch=true"
)

// shardEnv is env with Bars spread over namespaces, and replicas that
// name themselves (POD_NAME) so that the audit log tells their writes
// apart by user agent.
type shardEnv struct {
	*env
	namespaces []string
	replicas   map[string]*controller
	plain      bool // replicas without the race detector (plainController)
}

func newShardEnv(t *testing.T, bars, namespaces int, gate bool) *shardEnv {
	t.Helper()
	opts := localcluster.Options{CRDs: []string{crdDir}, AuditLog: true}
	if gate {
		opts.APIServerFlags = []string{shardGate}
	}
	e := &shardEnv{env: newEnvWith(t, bars, opts), replicas: map[string]*controller{}}
	for i := range namespaces {
		ns := fmt.Sprintf("sharded-%02d", i)
		if _, err := e.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.namespaces = append(e.namespaces, ns)
	}
	return e
}

// plainBinary is the controller built without the race detector, for
// the 5,000-Bar cases: three -race replicas cost the shared two cores
// several times the CPU, and what those cases prove is counts. The
// smaller cases keep the race detector on the shard handovers.
var (
	plainOnce   sync.Once
	plainBinary string
	plainErr    error
)

func plainController(t *testing.T) string {
	t.Helper()
	plainOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bar-faults-plain-")
		if err != nil {
			plainErr = err
			return
		}
		plainBinary, plainErr = localcluster.BuildControllerWithoutRace(dir)
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainBinary
}

// startReplica starts one replica of the sharded controller.
func (e *shardEnv) startReplica(t *testing.T, name string) *controller {
	t.Helper()
	return e.startWith(t, name, shardCount)
}

// startWith starts a replica with --shards=count; 1 is the unsharded
// controller, started as it always was (no --shards).
func (e *shardEnv) startWith(t *testing.T, name string, count int) *controller {
	t.Helper()
	binary := controllerBinary
	if e.plain {
		binary = plainController(t)
	}
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + e.cluster.Kubeconfig, "--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1],
		"--leader-elect", "--leader-elect-lease-namespace=" + e.ns, insecureMetrics}
	if count > 1 {
		args = append(args, fmt.Sprintf("--shards=%d", count))
	}
	p, err := localcluster.StartProcess(name, binary, filepath.Join(e.dir, name+".log"),
		[]string{"GORACE=atexit_sleep_ms=0", "POD_NAME=" + name}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	c := &controller{Process: p, metricsURL: "http://" + addrs[0] + "/metrics", readyzURL: "http://" + addrs[1] + "/readyz"}
	e.replicas[name] = c
	return c
}

// startBalanced starts the replicas named and waits until they hold
// their fair shares of the shards; it returns the names.
func (e *shardEnv) startBalanced(t *testing.T, names ...string) []string {
	t.Helper()
	for _, name := range names {
		e.startReplica(t, name)
	}
	e.waitBalanced(t, names...)
	return names
}

// createBars creates e.n Bars, round-robin over the namespaces.
func (e *shardEnv) createBars(t *testing.T) {
	t.Helper()
	e.createRange(t, 0, e.n)
}

// createRange creates Bars from up to to, of the e.n createBars makes.
func (e *shardEnv) createRange(t *testing.T, from, to int) {
	t.Helper()
	ctx := t.Context()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 1)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				ns := e.namespaces[i%len(e.namespaces)]
				name := fmt.Sprintf("bar-%05d", i)
				bar := &barv1.Bar{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: name}, Replicas: ptr.To[int32](1)}}
				if _, err := e.bars.BarcontrollerV1().Bars(ns).Create(ctx, bar, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// waitConverged waits until every Bar has its Deployment, controlled by
// it and carrying its bucket, and a current status. The 10 minutes are a
// hang bound (5,000 Bars under three -race replicas converge in about 2).
func (e *shardEnv) waitConverged(t *testing.T) {
	t.Helper()
	e.waitConvergedOf(t, e.n, true)
}

// waitConvergedOf waits until want Bars are converged; bucket asks that
// their Deployments carry their buckets (what sharded replicas write).
func (e *shardEnv) waitConvergedOf(t *testing.T, want int, bucket bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		done := 0
		for _, ns := range e.namespaces {
			bars, err := e.bars.BarcontrollerV1().Bars(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			deps, err := e.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			controlled := map[types.UID]string{}
			for _, d := range deps.Items {
				if ref := metav1.GetControllerOf(&d); ref != nil {
					controlled[ref.UID] = d.Labels[shards.BucketLabel]
				}
			}
			for _, b := range bars.Items {
				got, ok := controlled[b.UID]
				if ok && (!bucket || got == shards.BucketValue(b.UID)) && b.Status.ObservedGeneration == b.Generation {
					done++
				}
			}
		}
		last = fmt.Sprintf("%d of %d Bars converged", done, want)
		return done == want, nil
	})
	if err != nil {
		t.Fatalf("waiting for convergence: %v (%s)", err, last)
	}
}

// shardOf maps every Bar, by namespace/name, to its shard.
func (e *shardEnv) shardOf(t *testing.T) map[string]int {
	t.Helper()
	of := map[string]int{}
	for _, ns := range e.namespaces {
		bars, err := e.bars.BarcontrollerV1().Bars(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bars.Items {
			for _, s := range shards.All(shardCount) {
				if s.Holds(b.UID) {
					of[ns+"/"+b.Name] = s.Index
				}
			}
		}
	}
	return of
}

// write is one audited write of a Bar or a Deployment by a replica.
type write struct {
	replica, key, what  string
	code                int
	received, completed time.Time
}

func (w write) String() string {
	return fmt.Sprintf("%s %s %d by %s at %s", w.what, w.key, w.code, w.replica, w.received.Format(time.StampMicro))
}

// replicaWrites are the replicas' writes of Bars and Deployments in the
// sharded namespaces, in the order the API server received them. A
// replica's user agent ends in its POD_NAME (internal/version.UserAgent).
func (e *shardEnv) replicaWrites(t *testing.T) []write {
	t.Helper()
	events, err := e.cluster.AuditedWrites(func(ev localcluster.AuditEvent) bool {
		return ev.ObjectRef != nil && strings.HasPrefix(ev.ObjectRef.Namespace, "sharded-") &&
			(ev.ObjectRef.Resource == "bars" || ev.ObjectRef.Resource == "deployments") &&
			strings.HasPrefix(ev.UserAgent, "bar-controller/")
	})
	if err != nil {
		t.Fatal(err)
	}
	var writes []write
	for _, ev := range events {
		replica := ""
		for name := range e.replicas {
			if strings.Contains(ev.UserAgent, name) {
				replica = name
			}
		}
		if replica == "" {
			t.Fatalf("a write by no replica of this case: %s", ev)
		}
		code := 0
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		writes = append(writes, write{replica: replica, key: ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name,
			what: ev.Verb + " " + ev.ObjectRef.Resource + "/" + ev.ObjectRef.Subresource, code: code, received: ev.Received, completed: ev.Completed})
	}
	sort.SliceStable(writes, func(i, j int) bool { return writes[i].received.Before(writes[j].received) })
	return writes
}

// checkFenced fails if two replicas wrote the same shard at overlapping
// times: within a shard, writes come in runs by one replica, and each
// run's last write was answered before the next run's first arrived.
func checkFenced(t *testing.T, writes []write, shardOf map[string]int) {
	t.Helper()
	type run struct {
		replica             string
		first, lastAnswered time.Time
	}
	runs := map[int][]run{}
	for _, w := range writes {
		k, ok := shardOf[w.key]
		if !ok {
			continue // a Deployment named for no Bar: not one of ours
		}
		rs := runs[k]
		if n := len(rs); n > 0 && rs[n-1].replica == w.replica {
			rs[n-1].lastAnswered = latest(rs[n-1].lastAnswered, w.completed)
		} else {
			rs = append(rs, run{replica: w.replica, first: w.received, lastAnswered: w.completed})
		}
		runs[k] = rs
	}
	for k, rs := range runs {
		for i := 1; i < len(rs); i++ {
			if !rs[i-1].lastAnswered.Before(rs[i].first) {
				t.Errorf("shard %d: %s wrote until %s, %s from %s: two writers at once",
					k, rs[i-1].replica, rs[i-1].lastAnswered.Format(time.StampMicro), rs[i].replica, rs[i].first.Format(time.StampMicro))
			}
		}
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// perBar lists the writes of each Bar: its Deployment's and its
// status's (the Events are counted apart, by the API server's metrics in
// the bench).
func perBar(writes []write) map[string][]write {
	n := map[string][]write{}
	for _, w := range writes {
		n[w.key] = append(n[w.key], w)
	}
	return n
}

// shardMetrics sums a replica's per-shard series.
func shardMetrics(t *testing.T, c *controller) (bars, kept, dropped, held float64) {
	t.Helper()
	m := c.metrics(t)
	bars, _ = m.Value("bar_controller_shard_bars", nil)
	kept, _ = m.Value("bar_controller_shard_watch_events_total", map[string]string{"outcome": "kept"})
	dropped, _ = m.Value("bar_controller_shard_watch_events_total", map[string]string{"outcome": "dropped"})
	held, _ = m.Value("bar_controller_shard_held", nil)
	return
}

// waitBalanced waits until the replicas hold shardCount/len shards each.
func (e *shardEnv) waitBalanced(t *testing.T, names ...string) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		last = last[:0]
		ok := true
		for _, name := range names {
			// A replica that is starting does not listen yet.
			m, err := localcluster.Scrape(http.DefaultClient, e.replicas[name].metricsURL, "")
			if err != nil {
				last = append(last, fmt.Sprintf("%s: %v", name, err))
				ok = false
				continue
			}
			held, _ := m.Value("bar_controller_shard_held", nil)
			last = append(last, fmt.Sprintf("%s: %v", name, held))
			ok = ok && int(held) == shardCount/len(names)
		}
		return ok, nil
	})
	if err != nil {
		for _, name := range names {
			t.Logf("%s's log ends:\n%s", name, e.replicas[name].LogTail(30))
		}
		t.Fatalf("replicas never shared the shards evenly: %s", strings.Join(last, ", "))
	}
}
