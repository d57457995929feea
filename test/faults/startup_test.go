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
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// A controller that starts into a broken world must not crash-loop or
// pretend: it says what is missing, stays unready, and carries on by
// itself once the world is whole. Its informers retry with client-go's
// backoff (0.8 s doubling to a 30-60 s ceiling), so the fault is kept
// short enough that the retry after it comes within seconds.

// recoveryTimeout covers the longest backoff step a short fault can reach
// (at most 25.6 s by the sixth retry) with room to spare.
const recoveryTimeout = 90 * time.Second

// The CRD arrives after the controller, as when one kubectl apply creates
// both and the Deployment wins the race.
func TestControllerStartsBeforeCRD(t *testing.T) {
	quick(t)
	e := newEnvWith(t, 100, localcluster.Options{})
	c := e.startController(t, "controller")
	// client-go's reflector names the resource it cannot list, so whoever
	// reads the log learns which CRD is missing.
	line := waitLog(t, c.Process, 30*time.Second, "bars.barcontroller.dev", "could not find the requested resource")
	t.Logf("client-go says: %s", line)
	// And the controller says what to do about it.
	line = waitLog(t, c.Process, 30*time.Second, "is the Bar CRD installed?")
	t.Logf("the controller says: %s", line)
	c.expectUnready(t, 3*time.Second)

	crdAt := time.Now()
	e.installCRDs(t)
	ready := c.waitReady(t, crdAt)
	e.createBars(t)
	took := e.waitConverged(t, crdAt)
	c.expectAlive(t)
	record(t, "controller started before the CRD: /readyz 200 after the CRD is created", ready)
	record(t, "controller started before the CRD, 100 Bars: from the CRD's creation", took)
	t.Logf("ready %v after the CRD was created; converged after %v", ready, took)
}

// kube-apiserver is down when the controller starts (a control-plane
// upgrade, a node reboot), and the Bars are already there.
func TestControllerStartsWhileAPIServerDown(t *testing.T) {
	quick(t)
	e := newEnv(t, 100)
	e.createBars(t)
	if err := e.cluster.Kill("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	c := e.startController(t, "controller")
	c.expectUnready(t, 5*time.Second)
	// The log must say what is wrong, naming the address it cannot reach.
	host := strings.TrimPrefix(e.cluster.Server, "https://")
	line := waitLog(t, c.Process, 30*time.Second, host, "connection refused")
	t.Logf("the controller says: %s", line)

	if err := e.cluster.Restart(t.Context(), "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	ready := c.waitReady(t, upAt)
	took := e.waitConverged(t, upAt)
	c.expectAlive(t)
	record(t, "controller started with kube-apiserver down: /readyz 200 after it is back", ready)
	record(t, "controller started with kube-apiserver down, 100 Bars: from its return", took)
	t.Logf("ready %v after kube-apiserver was; converged after %v", ready, took)

}

// expectUnready checks that /readyz answers 503 every time for d, once it
// answers at all (within 30 s, a hang bound): the kubelet must keep an
// unsynced controller out. d is how long it is watched, not a bound: a
// slow machine cannot turn a 503 into a 200.
func (c *controller) expectUnready(t *testing.T, d time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.readyz(ctx) != 0, nil
	})
	if err != nil {
		t.Fatalf("/readyz of %s never answered:%s", c.Name, c.LogTail(20))
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if code := c.readyz(t.Context()); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz answered %d while the controller cannot list Bars, want 503", code)
		}
	}
}

// waitReady waits for /readyz to answer 200 and returns the time since;
// recoveryTimeout is a hang bound from client-go's backoff.
func (c *controller) waitReady(t *testing.T, since time.Time) time.Duration {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, recoveryTimeout, true, func(ctx context.Context) (bool, error) {
		return c.readyz(ctx) == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s not ready %v after the fault ended:%s", c.Name, recoveryTimeout, c.LogTail(30))
	}
	return time.Since(since)
}

// expectAlive fails if the process exited: recovering "by itself" means
// without a restart.
func (c *controller) expectAlive(t *testing.T) {
	t.Helper()
	select {
	case <-c.Exited():
		t.Fatalf("%s exited (%v); it should have waited for the API:%s", c.Name, c.State(), c.LogTail(30))
	default:
	}
}

// SIGTERM while kube-apiserver is down: the informers are asleep in their
// backoff, and the controller must still exit 0 well within the kubelet's
// grace period (30 s by default) instead of waiting them out.
func TestSIGTERMWhileAPIServerDown(t *testing.T) {
	quick(t)
	e := newEnv(t, 0)
	if err := e.cluster.Kill("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	c := e.startController(t, "controller")
	waitLog(t, c.Process, 30*time.Second, strings.TrimPrefix(e.cluster.Server, "https://"), "connection refused")
	// Long enough for the reflectors' backoff to pass the shutdown bound.
	time.Sleep(10 * time.Second)
	stopAt := time.Now()
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A hang bound: the assertion on the exit time follows.
	select {
	case <-c.Exited():
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after SIGTERM:%s", c.LogTail(20))
	}
	took := c.ExitedAt().Sub(stopAt)
	record(t, "controller SIGTERMed while kube-apiserver is down: exit 0", took)
	t.Logf("exited %v after SIGTERM", took)
	if code := c.State().ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0:%s", code, c.LogTail(20))
	}
	if bound := informerShutdownTimeout + exitSlack; took > bound {
		t.Errorf("exit %v after SIGTERM, want within %v (the informers' %v, plus %v for the rest):%s",
			took, bound, informerShutdownTimeout, exitSlack, c.LogTail(20))
	}
}

// informerShutdownTimeout is main.go's bound on waiting for the informers
// at exit, which this case holds the controller to, and eventFlushTimeout
// events.go's bound on waiting for the Events still to write: both
// configuration. exitSlack is what the rest of the shutdown (the HTTP
// servers, the process exit) may add, from a noise model: in 8 runs of
// this case on the 2-core machine, other tests running beside it, the
// exit came 7-15 ms after the informers' bound (5.007-5.015 s; one run
// exited at 3.3 s, its informers done sooner); a SIGTERM'd controller
// with nothing in flight exits in 6-20 ms (TestSIGTERMWhileAPIServer-
// Blackholed, 8 runs; docs/measurements/tests-and-real-node.md, about 20 runs),
// up to 250 ms more after a recent Event (eventQuiet). 500 ms is twice the
// largest of those. Under make test the binary has the race detector, whose
// default 1 s sleep at exit startController turns off (GORACE), so it counts
// for nothing here.
const (
	informerShutdownTimeout = 5 * time.Second
	eventFlushTimeout       = 5 * time.Second
	exitSlack               = 500 * time.Millisecond
)
