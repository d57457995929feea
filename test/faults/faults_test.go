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
	"syscall"
	"testing"
	"time"
)

// The API server is SIGKILLed a second into the convergence of 1,000
// Bars and started again 2 s later: every watch breaks, and the
// controller must relist and finish.
func TestAPIServerKilledDuringConvergence(t *testing.T) {
	quick(t)
	e := newEnv(t, 1000)
	e.startController(t, "controller")
	start := time.Now()
	go func() {
		time.Sleep(time.Second)
		if err := e.cluster.KillAndRestart(t.Context(), "kube-apiserver", 2*time.Second); err != nil {
			t.Errorf("restarting kube-apiserver: %v", err)
		}
	}()
	e.createBars(t)
	took := e.waitConverged(t, start)
	record(t, "kube-apiserver SIGKILLed and restarted, 1,000 Bars", took)
	t.Logf("converged %v after the first create", took)
}

// etcd freezes for 10 s mid-run (SIGSTOP, then SIGCONT): the API server's
// requests hang and time out; nothing may be lost or doubled.
func TestEtcdStoppedForTenSeconds(t *testing.T) {
	quick(t)
	e := newEnv(t, 1000)
	e.startController(t, "controller")
	start := time.Now()
	go func() {
		time.Sleep(time.Second)
		if err := e.cluster.Pause("etcd", 10*time.Second); err != nil {
			t.Errorf("pausing etcd: %v", err)
		}
	}()
	e.createBars(t)
	took := e.waitConverged(t, start)
	record(t, "etcd stopped for 10 s, 1,000 Bars", took)
	t.Logf("converged %v after the first create", took)
}

// The controller is SIGKILLed three times during a 2,000-Bar convergence
// and started again each time; then SIGTERM must end it, exit 0, quickly.
func TestControllerKilledThreeTimes(t *testing.T) {
	quick(t)
	e := newEnv(t, 2000)
	p := e.startController(t, "controller-1")
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.createBars(t)
	}()
	for i := 2; i <= 4; i++ {
		time.Sleep(1500 * time.Millisecond)
		_ = p.Signal(syscall.SIGKILL)
		<-p.Exited()
		p = e.startController(t, "controller-"+string(rune('0'+i)))
	}
	<-done
	took := e.waitConverged(t, start)
	record(t, "controller SIGKILLed 3 times, 2,000 Bars", took)

	stopAt := time.Now()
	_ = p.Signal(syscall.SIGTERM)
	// A hang bound from configuration, not a performance claim: with no
	// sync in flight, a graceful stop waits at most for the Events still
	// to write (eventFlushTimeout) and for the informers
	// (informerShutdownTimeout), plus exitSlack. Measured: 0.01 s.
	select {
	case <-p.Exited():
	case <-time.After(eventFlushTimeout + informerShutdownTimeout + exitSlack):
		t.Fatalf("the controller did not exit within %v of SIGTERM:%s", eventFlushTimeout+informerShutdownTimeout+exitSlack, p.LogTail(20))
	}
	if code := p.State().ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	exit := p.ExitedAt().Sub(stopAt)
	record(t, "controller SIGTERM: exit 0", exit)
	t.Logf("converged %v after the first create; SIGTERM to exit 0: %v", took, exit)
}
