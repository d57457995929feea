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

package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The flood of TestListenerFlood: 1,000 connections at once, half to the
// conversion webhook and half to the metrics endpoint, from eight
// addresses that are not the API server's (it calls from 127.0.0.1; Linux
// routes all of 127/8 to the loopback interface), each slot dialling again
// when the listener ends its connection, for listenerFloodWindow.
const (
	listenerFloodSlots  = 1000
	listenerFloodWindow = 10 * time.Second
	listenerFloodBars   = 50
	// minConversionSuccess is the share of the API server's conversion
	// calls, and of the clients' v1alpha1 lists, that must succeed
	// during the flood.
	minConversionSuccess = 0.99
)

// TestListenerFlood floods a leading controller replica's webhook and
// metrics listeners with connections that send about 1 MiB of headers
// slowly, or a small header and a declared body that never comes, while
// clients list Bars at v1alpha1 through the API server, which converts
// each list with the webhook (issue 39). The replica runs under the
// installed Deployment's GOMEMLIMIT, and its peak resident memory (VmHWM)
// must stay under the Deployment's memory limit, and under the
// conversion-only Deployment's too: that replica opens the same listeners
// with the same bounds, rests at about the same memory as this one with
// its 50 Bars, and has the smallest limit, so what the flood costs here
// must fit there. Then four addresses hold every slot of the webhook
// with requests waiting for bodies, dialling again as they are cut (the
// round-2 review's M1). In each phase at least 99 % of the API server's
// conversion calls (its own apiserver_conversion_webhook_request_total)
// and of the lists must succeed, and through both the replica keeps the
// Lease: no other holder, no release, no transition.
func TestListenerFlood(t *testing.T) {
	env, ns := setupOps(t)
	env.install(t)
	goMemLimit, memLimit := manifestMemory(t, "install/deployment.yaml")
	_, smallestLimit := manifestMemory(t, "conversion-only/deployment.yaml")
	kubeconfig, _ := env.serviceAccountConfig(t)
	t.Setenv("GOMEMLIMIT", goMemLimit) // the child inherits it, as the Pod's container would
	hook := localWebhook(t, env, installNamespace)
	webhookAddr := strings.TrimPrefix(hook[0], "--conversion-webhook-bind-address=")
	// The shipped Lease timing (the binary's defaults, which the
	// Deployment keeps), in the Lease's shipped namespace.
	args := slices.Concat([]string{"--leader-elect", "--leader-elect-lease-namespace=" + installNamespace, "--namespace=" + ns}, hook)
	// Without the race detector, as TestWebhookFlood: its shadow memory
	// is not what the Pod's limit is for.
	c := startBinary(t, plainControllerBinary(t), "listener-flooded", kubeconfig, args...)
	c.waitProbe(t, "/readyz", 200)
	waitLeader(t, env, installNamespace, c.Name+"_")
	for i := range listenerFloodBars {
		createOpsBar(t, env, ns, fmt.Sprintf("listener-%02d", i))
	}
	if _, err := env.bars.BarcontrollerV1alpha1().Bars(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("listing Bars at v1alpha1 before the flood: %v", err)
	}
	lease := watchLease(t, env, installNamespace)
	transitionsBefore := leaseTransitions(t, env)

	var sources []net.IP
	for i := range 8 {
		sources = append(sources, net.IPv4(127, 0, 0, byte(2+i)))
	}
	// First, what a header can cost: half the connections send a big one
	// slowly, all of them declare a body and send none of it.
	hwmBefore := peakRSS(t, c.Pid())
	floodPhase(t, env, ns, c, "headers and stalled bodies", []*headerFlood{
		// The webhook: a ConversionReview of the largest size it takes
		// (internal/conversion's maxRequestBytes), declared and never sent.
		{target: webhookAddr, method: "POST", path: "/convert", useTLS: true, sources: sources, bodyBytes: 4 << 20,
			slots: listenerFloodSlots / 2},
		// The metrics endpoint (plain HTTP here, for the test's scrapes):
		// a body under net/http's 256 KiB that the server drains after the
		// handler, waiting for it.
		{target: c.metricsAddr, method: "GET", path: "/metrics", sources: sources, bodyBytes: 64 << 10,
			slots: listenerFloodSlots / 2},
	}, nil)
	hwm := peakRSS(t, c.Pid())
	t.Logf("peak resident memory: %d MiB before the flood, %d MiB after (limit %d MiB, GOMEMLIMIT %s)",
		hwmBefore>>20, hwm>>20, memLimit>>20, goMemLimit)
	if hwm >= memLimit {
		t.Errorf("peak resident memory %d MiB reached the Pod's memory limit, %d MiB", hwm>>20, memLimit>>20)
	}
	if hwm >= smallestLimit {
		t.Errorf("peak resident memory %d MiB reached the conversion-only Pod's memory limit, %d MiB, which serves the same listeners",
			hwm>>20, smallestLimit>>20)
	}
	// Then what holding the webhook's connections busy can do (issue 39,
	// round-2 review, M1): four addresses hold 64 connections each, the
	// webhook's Total of 256, all waiting for bodies, and 32 more slots
	// each dial again every promptRedial, so that a place that ends is
	// taken again within milliseconds. With every connection busy and none
	// idle to give way, the API server got 5 of 110 reviews answered.
	// The API server reuses the connections it has (kept alive 30 s), so
	// the flood takes every place first, once the API server's last ones
	// are closed: then each review needs a new connection, as a burst of
	// them after a quiet spell does.
	waitWebhookConnections(t, c, func(n float64) bool { return n == 0 }, "none open")
	floodPhase(t, env, ns, c, "the webhook's slots held by bodies", []*headerFlood{
		{target: webhookAddr, method: "POST", path: "/convert", useTLS: true, sources: sources[:4], bodyBytes: 4 << 20,
			slots: 4 * (64 + 32), prompt: true},
	}, func() {
		waitWebhookConnections(t, c, func(n float64) bool { return n >= webhookConnections }, "all taken")
	})

	select {
	case <-c.Exited():
		t.Fatalf("the flooded replica exited: %v", c.State())
	default:
	}
	if holders := lease.holders(); len(holders) != 1 || !strings.HasPrefix(holders[0], c.Name+"_") {
		t.Errorf("the Lease's holders during the flood: %q, want only the flooded replica", holders)
	}
	if n := leaseTransitions(t, env); n != transitionsBefore {
		t.Errorf("leaseTransitions went from %d to %d during the flood", transitionsBefore, n)
	}
	if v, _ := c.scrape(t).Value("leader_election_master_status", nil); v != 1 {
		t.Errorf("leader_election_master_status %v after the flood, want 1", v)
	}
}

// floodPhase runs floods for listenerFloodWindow while two clients list
// Bars at v1alpha1 through the API server, from when filled returns (at
// once if it is nil) for half the window, and checks that at least
// minConversionSuccess of the API server's conversion calls and of the
// lists succeeded.
func floodPhase(t *testing.T, env *opsEnv, ns string, c *controllerProcess, name string, floods []*headerFlood, filled func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for _, f := range floods {
		wg.Go(func() { f.run(ctx, listenerFloodWindow) })
	}
	window := listenerFloodWindow
	if filled != nil {
		filled()
		window /= 2 // within the flood's window, which the fill took a second or two of
	}
	apiBefore := conversionCalls(t, env)
	lists := listDuringFlood(t, env, ns, window)
	apiAfter := conversionCalls(t, env)
	wg.Wait()
	logListenerMetrics(t, c)
	for i, f := range floods {
		t.Logf("%s, flood %d (%s %s): %s", name, i, f.method, f.path, f.summary())
	}
	ok, failed := apiAfter[0]-apiBefore[0], apiAfter[1]-apiBefore[1]
	t.Logf("%s: the API server's conversion calls: %.0f succeeded, %.0f failed; v1alpha1 lists: %s", name, ok, failed, lists)
	if ok+failed == 0 || ok/(ok+failed) < minConversionSuccess {
		t.Errorf("%s: %.0f of %.0f of the API server's conversion calls succeeded, want at least %.0f%%",
			name, ok, ok+failed, 100*minConversionSuccess)
	}
	if lists.total() == 0 || float64(lists.ok.Load())/float64(lists.total()) < minConversionSuccess {
		t.Errorf("%s: v1alpha1 lists: %s, want at least %.0f%% to succeed", name, lists, 100*minConversionSuccess)
	}
}

// webhookConnections is the most connections the webhook holds at once
// (internal/conversion's connLimits).
const webhookConnections = 256

// waitWebhookConnections waits until the replica's own gauge of the
// webhook's open connections satisfies ok.
func waitWebhookConnections(t *testing.T, c *controllerProcess, ok func(float64) bool, what string) {
	t.Helper()
	const hang = 2 * time.Minute // the webhook closes an idle connection after 30 s
	var n float64
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n, _ = c.scrape(t).Value("bar_controller_listener_connections", map[string]string{"endpoint": "conversion-webhook"}); ok(n) {
			return
		}
	}
	t.Fatalf("the webhook's open connections: %.0f after %v, want %s", n, hang, what)
}

// logListenerMetrics logs what the replica's listeners refused and cut,
// and how its webhook answered, by its own counts.
func logListenerMetrics(t *testing.T, c *controllerProcess) {
	t.Helper()
	m := c.scrape(t)
	var lines []string
	for _, name := range []string{"bar_controller_listener_connections_refused_total", "bar_controller_listener_connections_unserved_total",
		"bar_controller_listener_slow_bodies_total", "bar_controller_conversion_webhook_requests_total"} {
		for _, metric := range m[name].GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %.0f", name, strings.Join(labels, ","), metric.GetCounter().GetValue()))
		}
	}
	t.Logf("the replica's own counts:\n%s", strings.Join(lines, "\n"))
}

func leaseTransitions(t *testing.T, env *opsEnv) int32 {
	t.Helper()
	l, err := env.kube.CoordinationV1().Leases(installNamespace).Get(t.Context(), "bar-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.LeaseTransitions, 0)
}

// conversionCalls is the API server's own count of its conversion webhook
// calls: succeeded, failed (apiserver_conversion_webhook_request_total,
// one per call, after the client's retries).
func conversionCalls(t *testing.T, env *opsEnv) [2]float64 {
	t.Helper()
	client, err := rest.HTTPClientFor(env.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	m, err := localcluster.Scrape(client, env.cluster.Config.Host+"/metrics", env.cluster.Config.BearerToken)
	if err != nil {
		t.Fatal(err)
	}
	ok, _ := m.Value("apiserver_conversion_webhook_request_total", map[string]string{"result": "success"})
	failed, _ := m.Value("apiserver_conversion_webhook_request_total", map[string]string{"result": "failure"})
	return [2]float64{ok, failed}
}

// listCounts counts the v1alpha1 lists of a flood by outcome.
type listCounts struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string // the first few
}

func (l *listCounts) total() int64 { return l.ok.Load() + l.failed.Load() }

func (l *listCounts) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d succeeded, %d failed %q", l.ok.Load(), l.failed.Load(), l.errs)
}

// listDuringFlood lists the namespace's Bars at v1alpha1 from two clients,
// one list after another, for window: each list is one ConversionReview
// of listenerFloodBars Bars that the API server sends the webhook. A list
// gets 30 s, the API server's own bound on a webhook call and more; one
// that takes longer fails.
func listDuringFlood(t *testing.T, env *opsEnv, ns string, window time.Duration) *listCounts {
	t.Helper()
	counts := &listCounts{}
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				list, err := env.bars.BarcontrollerV1alpha1().Bars(ns).List(lctx, metav1.ListOptions{})
				lcancel()
				if err == nil && len(list.Items) != listenerFloodBars {
					err = fmt.Errorf("%d Bars, want %d", len(list.Items), listenerFloodBars)
				}
				if err != nil {
					counts.failed.Add(1)
					counts.mu.Lock()
					if len(counts.errs) < 3 {
						counts.errs = append(counts.errs, err.Error())
					}
					counts.mu.Unlock()
				} else {
					counts.ok.Add(1)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return counts
}
