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
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The flood's shape. Any Pod can reach the webhook's Service where no
// NetworkPolicy is enforced; this one sends from 127.0.0.2, so the API
// server (calling from 127.0.0.1) is another client address, as it is in
// a cluster.
const (
	// Reviews far over the limit, each a valid ConversionReview with one
	// Bar carrying a huge annotation, sent as fast as the socket takes
	// them: the webhook once read each whole and converted it (the issue:
	// a few of them took a replica past its memory limit).
	oversizeRequests = 8
	oversizeBytes    = 16 << 20
	// Bodies declared at 1 MiB and sent at a few bytes a second: each
	// once held a goroutine and a connection for as long as its sender
	// liked, then its declared length of the budget for 10 s.
	slowRequests = 24
	slowBytes    = 1 << 20
	// Requests with no Content-Length (chunked), far over the limit.
	chunkedRequests = 4
	// v1alpha1 reads of one Bar during the flood, each a ConversionReview
	// the API server sends.
	convertedReads = 20
	// Then valid reviews of 3 MiB, converted, from two addresses at once:
	// the budget full of work that is not slow, the webhook's peak memory.
	largeRequests = 16
	largeBytes    = 3 << 20
)

// What internal/conversion/limit.go allows the process (budgetBytes), and
// what a request reserves before its body arrives (minReservation): the
// counts below are judged by them.
const (
	budgetBytes         = 8 << 20
	minReservationBytes = 4 << 10
)

// TestWebhookFlood floods a replica's webhook with oversize reviews, slow
// bodies and chunked bodies from many connections at once, while the API
// server converts a Bar through it, then with large valid reviews from two
// more addresses. Two replicas: a conversion-only one (the Pod with the
// smallest memory limit, artifacts/conversion-only), and a controller that
// leads (every replica is a leader candidate: one that dies of a flood
// takes the Lease with it). Each runs under its manifest's GOMEMLIMIT and
// is judged by counts: the answers by result, the bytes the webhook read
// (its own counter), the most bytes its requests in flight reserved at
// once, and the process's peak resident memory (the kernel's VmHWM, a
// high-water mark no sampling can miss), which must stay under the
// manifest's memory limit. Every read through the webhook succeeds, and
// the leader keeps its Lease.
func TestWebhookFlood(t *testing.T) {
	t.Run("conversion-only", func(t *testing.T) {
		env, ns := setupOps(t)
		env.install(t)
		goMemLimit, memLimit := manifestMemory(t, "conversion-only/deployment.yaml")
		flood(t, env, ns, goMemLimit, memLimit, []string{"--conversion-webhook-only"}, nil, nil)
	})
	t.Run("leader", func(t *testing.T) {
		env, ns := setupOps(t)
		env.install(t)
		goMemLimit, memLimit := manifestMemory(t, "install/deployment.yaml")
		// The Lease where the shipped Role lets the controller have it.
		args := slices.Concat(opsElectionFlags, []string{"--leader-elect-lease-namespace=" + installNamespace, "--namespace=" + ns})
		var c *controllerProcess
		lease := func() (string, int32) {
			l, err := env.kube.CoordinationV1().Leases(installNamespace).Get(t.Context(), "bar-controller", metav1.GetOptions{})
			if err != nil {
				return "", 0
			}
			return ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0)
		}
		var holder string
		var transitions int32
		flood(t, env, ns, goMemLimit, memLimit, args, func(p *controllerProcess) {
			c = p
			eventually(t, "the replica to lead", func(context.Context) (bool, error) {
				holder, transitions = lease()
				return strings.HasPrefix(holder, p.Name+"_"), nil
			})
		}, func() {
			if h, n := lease(); h != holder || n != transitions {
				t.Errorf("the Lease went from %s (%d transitions) to %s (%d) during the flood", holder, transitions, h, n)
			}
			if v, _ := c.scrape(t).Value("leader_election_master_status", nil); v != 1 {
				t.Errorf("leader_election_master_status %v after the flood, want 1", v)
			}
		})
	})
}

// flood starts a replica with args and the webhook, floods it and judges
// it; onReady and onDone, if given, run once the replica is ready and once
// the flood is judged.
func flood(t *testing.T, env *opsEnv, ns, goMemLimit string, memLimit int64, args []string, onReady func(*controllerProcess), onDone func()) {
	t.Helper()
	kubeconfig, _ := env.serviceAccountConfig(t)
	t.Setenv("GOMEMLIMIT", goMemLimit) // the child inherits it, as the Pod's container would
	hook := localWebhook(t, env, installNamespace)
	addr := strings.TrimPrefix(hook[0], "--conversion-webhook-bind-address=")
	// Built without the race detector: under make test's -race its shadow
	// memory alone took the replica past the 128 MiB limit (258 MiB peak).
	c := startBinary(t, plainControllerBinary(t), "flooded", kubeconfig, append(slices.Clone(args), hook...)...)
	c.waitProbe(t, "/readyz", 200)
	if onReady != nil {
		onReady(c)
	}
	bar := createOpsBar(t, env, ns, "flooded")
	checkConvertedRead(t, env, ns, bar.Name, bar.Spec.Deployment.Name)
	value := func(name string) float64 {
		t.Helper()
		v, ok := c.scrape(t).Value(name, nil)
		if !ok {
			t.Errorf("the webhook exports no %s", name)
		}
		return v
	}
	results := func() map[string]float64 {
		m := c.scrape(t)
		out := map[string]float64{}
		for _, r := range []string{"success", "failure", "invalid", "too_large", "busy"} {
			out[r], _ = m.Value("bar_controller_conversion_webhook_requests_total", map[string]string{"result": r})
		}
		return out
	}
	before := results()
	readBefore := value("bar_controller_conversion_webhook_request_bytes_total")
	hwmBefore := peakRSS(t, c.Pid())

	f := &flooder{addr: addr, src: net.IPv4(127, 0, 0, 2), mu: new(sync.Mutex), codes: map[string]map[int]int{}}
	var wg sync.WaitGroup
	for range slowRequests {
		wg.Go(func() { f.post("slow", slowBytes, false, f.slowBody) })
	}
	// The slow bodies are admitted, each reserving what has arrived of
	// it (a first piece of its buffer), and cut off by the listener once
	// they fall behind its minimum rate: no waiting here for them to hold
	// anything.
	for range oversizeRequests {
		wg.Go(func() { f.post("oversize", oversizeBytes, false, f.oversizeBody(oversizeBytes)) })
	}
	for range chunkedRequests {
		wg.Go(func() { f.post("chunked", -1, true, f.oversizeBody(oversizeBytes)) })
	}
	// The API server's own reviews find room: they come from another
	// address.
	for i := range convertedReads {
		if _, err := env.bars.BarcontrollerV1alpha1().Bars(ns).Get(t.Context(), bar.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("v1alpha1 read %d of %d during the flood: %v", i+1, convertedReads, err)
		}
	}
	wg.Wait()
	phase1 := results()
	peak1 := value("bar_controller_conversion_webhook_reserved_bytes_max")
	// Two more clients, each within its share, together past the budget.
	big := []*flooder{
		{addr: addr, src: net.IPv4(127, 0, 0, 3), mu: f.mu, codes: f.codes},
		{addr: addr, src: net.IPv4(127, 0, 0, 4), mu: f.mu, codes: f.codes},
	}
	for i := range largeRequests {
		g := big[i%len(big)]
		wg.Go(func() { g.post("large", largeBytes, false, g.oversizeBody(largeBytes)) })
	}
	wg.Wait()
	phase2 := results()

	// The webhook's own counts of its answers are the verdict. A flooder
	// may miss an answer the webhook sent: a refused body is left unread,
	// and the connection closed under a client still writing can be reset
	// before the client reads (so the clients' counts are only logged,
	// and only their 200s are judged).
	codes := f.result()
	t.Logf("answers by kind and status code, as the flooders read them (0: none): %v", codes)
	t.Logf("the webhook's answers by result: %v before, %v after the first phase, %v after the large reviews", before, phase1, phase2)
	delta := func(a, b map[string]float64, result string) int { return int(b[result] - a[result]) }
	if n := delta(before, phase1, "too_large"); n != oversizeRequests {
		t.Errorf("oversize reviews refused as too large (413): %d, want %d", n, oversizeRequests)
	}
	// Slow bodies: admitted, and ended by the listener's body rate (400,
	// invalid); none refused as busy, since none held more than its first
	// piece. None completed. The chunked ones never reach the webhook: the
	// listener answers them 411 (internal/serving, requireLength).
	admitted := slowRequests - delta(before, phase1, "busy")
	if admitted != slowRequests {
		t.Errorf("%d of %d slow bodies admitted, want all: they hold only what arrived of them", admitted, slowRequests)
	}
	if n := delta(before, phase1, "invalid"); n != admitted {
		t.Errorf("%d requests refused as invalid, want the %d admitted slow bodies", n, admitted)
	}
	// What they reserved at once, with the API server's reviews: a first
	// piece each, where declared lengths once reserved the flooder's
	// whole share (issue 39).
	if bound := float64((slowRequests + convertedReads) * minReservationBytes); peak1 > bound {
		t.Errorf("the slow bodies and the API server's reviews reserved %.0f bytes at once, want at most a first piece each, %.0f", peak1, bound)
	}
	if n := codes["slow"][http.StatusOK] + codes["oversize"][http.StatusOK] + codes["chunked"][http.StatusOK]; n != 0 {
		t.Errorf("%d flood requests answered 200", n)
	}
	// Large reviews: converted while they fit the budget, refused (429)
	// past it, nothing else.
	converted := delta(phase1, phase2, "success")
	if refused := delta(phase1, phase2, "busy"); converted+refused != largeRequests || converted < budgetBytes/largeBytes {
		t.Errorf("large reviews: %d converted, %d refused as busy; want at least %d converted and the rest refused, of %d",
			converted, refused, budgetBytes/largeBytes, largeRequests)
	}
	// What the webhook read: the slow bodies' few bytes, the API server's
	// reviews and the large reviews it converted, none of the oversize or
	// refused bodies.
	read := value("bar_controller_conversion_webhook_request_bytes_total") - readBefore
	if bound := float64(admitted*slowBytes + convertedReads*(64<<10) + converted*largeBytes); read > bound {
		t.Errorf("the webhook read %.0f bytes of request bodies during the flood, want at most %.0f", read, bound)
	}
	if peak := value("bar_controller_conversion_webhook_reserved_bytes_max"); peak > budgetBytes {
		t.Errorf("requests in flight reserved %.0f bytes at once, over the budget of %d", peak, budgetBytes)
	}
	hwm := peakRSS(t, c.Pid())
	t.Logf("peak resident memory: %d MiB before the flood, %d MiB after (limit %d MiB, GOMEMLIMIT %s); read %.0f bytes",
		hwmBefore>>20, hwm>>20, memLimit>>20, goMemLimit, read)
	if hwm >= memLimit {
		t.Errorf("peak resident memory %d MiB reached the Pod's memory limit, %d MiB", hwm>>20, memLimit>>20)
	}
	c.waitProbe(t, "/readyz", 200)
	checkConvertedRead(t, env, ns, bar.Name, bar.Spec.Deployment.Name)
	if onDone != nil {
		onDone()
	}
}

// peakRSS is a process's peak resident memory in bytes (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			q, err := resource.ParseQuantity(strings.ReplaceAll(strings.TrimSpace(v), " kB", "Ki"))
			if err != nil {
				t.Fatal(err)
			}
			return q.Value()
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// The NetworkPolicy shipped in artifacts/networkpolicy is valid for the
// API server (a server-side dry run), selects the Pods of both Deployments
// that serve the webhook, and names ports their containers have: a label
// or port renamed in one place and not the other would leave the Pods
// open, or shut the API server out.
func TestNetworkPolicyManifest(t *testing.T) {
	env, _ := setupOps(t)
	env.install(t)
	dir := filepath.Join(artifactsDir, "networkpolicy")
	if out, err := env.cluster.Kubectl(t.Context(), "apply", "--server-side", "--dry-run=server", "-k", dir); err != nil {
		t.Fatalf("applying %s: %v\n%s", dir, err, out)
	}
	var policy networkingv1.NetworkPolicy
	readManifest(t, filepath.Join(dir, "networkpolicy.yaml"), &policy)
	selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"install/deployment.yaml", "conversion-only/deployment.yaml"} {
		var d appsv1.Deployment
		readManifest(t, filepath.Join(artifactsDir, path), &d)
		if !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("the NetworkPolicy does not select the Pods of %s", path)
			continue
		}
		ports := map[string]bool{}
		for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
			ports[p.Name] = true
		}
		if !ports["webhook"] {
			t.Errorf("%s has no port named webhook, which the NetworkPolicy admits the API server to", path)
		}
	}
}

func readManifest(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

var (
	plainBuild    sync.Once
	plainDir      string
	plainBinary   string
	plainBuildErr error
)

// removePlainBuild removes the build below, if a test made it (TestMain).
func removePlainBuild() {
	if plainDir != "" {
		os.RemoveAll(plainDir)
	}
}

// plainControllerBinary builds bar-controller without the race detector,
// once per test process, for the memory verdicts above.
func plainControllerBinary(t *testing.T) string {
	t.Helper()
	plainBuild.Do(func() {
		plainDir, plainBuildErr = os.MkdirTemp("", "bar-e2e-plain")
		if plainBuildErr != nil {
			return
		}
		plainBinary, plainBuildErr = localcluster.BuildControllerWithoutRace(plainDir)
	})
	if plainBuildErr != nil {
		t.Fatal(plainBuildErr)
	}
	return plainBinary
}
