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
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/leader"
)

// slowWrite is how long the slow webhook holds each write of the leader,
// so that its syncs are always in the middle of their writes.
const slowWrite = 3 * time.Second

// The leader loses its Lease while its syncs are in flight: a slow
// admission webhook holds every write it makes, and from some moment on
// its Lease renewals for good. It notices once its renewals have failed
// for the renew deadline (10 s); a standby takes over once the Lease has
// not been renewed for its duration (15 s). Between the two, the old
// leader must have stopped writing: the API server's audit log must show
// no write of the old leader completed after the new leader's first.
//
// From the moment the renewals are held, the webhook holds the leader's
// other writes too, until a second after the standby has taken the Lease
// (its first write): every write the old leader still has under way then
// would complete after the new leader's first, unless the loss has
// cancelled it.
func TestNoWritesAfterLeaseLost(t *testing.T) {
	quick(t)
	const bars = 300
	e := newEnvWith(t, bars, localcluster.Options{CRDs: []string{crdDir}, AuditLog: true})
	kubeconfigA := e.serviceAccountKubeconfig(t, "replica-a")
	kubeconfigB := e.serviceAccountKubeconfig(t, "replica-b")

	flags := []string{"--leader-elect", "--leader-elect-lease-namespace=" + e.ns, insecureMetrics}
	a := e.startReplica(t, "replica-a", append(flags, "--kubeconfig="+kubeconfigA)...)
	idA := identityOf(t, a)
	e.waitLease(t, func(l *coordinationv1.Lease) bool { return holder(l) == idA })
	// The standby looks every 500 ms instead of 2 s (jittered up to 4.4 s),
	// so it takes over within about a second of the Lease's expiry: the
	// earliest a new leader can begin, the worst case for the old one.
	b := e.startReplica(t, "replica-b", append(flags, "--kubeconfig="+kubeconfigB, "--leader-elect-retry-period=500ms")...)
	idB := identityOf(t, b)
	b.waitReady(t, time.Now())

	var leaseHeld atomic.Bool // from now on, replica-a's Lease writes never get through
	var held atomic.Int64     // writes of replica-a the webhook is holding now
	var underWay atomic.Int64 // other writes of replica-a held from then on
	tookOver := make(chan struct{})
	e.startHook(t, fmt.Sprintf("request.userInfo.username == 'system:serviceaccount:%s:replica-a'", e.ns),
		func(ctx context.Context, req *admissionv1.AdmissionRequest) {
			held.Add(1)
			defer held.Add(-1)
			if req.Resource.Resource == "leases" {
				if leaseHeld.Load() {
					<-ctx.Done() // until replica-a gives up, or hookTimeout
				}
				return
			}
			wait := slowWrite
			if leaseHeld.Load() {
				underWay.Add(1)
				select {
				case <-ctx.Done():
					return
				case <-tookOver:
				}
				wait = time.Second
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}, nil) // replica-a's renewals, every 2 s, reach it

	e.createBars(t)
	// Once replica-a's syncs are in the middle of their writes, its
	// renewals stop getting through.
	waitFor(t, time.Minute, "replica-a writing", func() bool { return held.Load() >= 4 })
	leaseHeld.Store(true)
	heldAt := time.Now()
	e.waitLease(t, func(l *coordinationv1.Lease) bool { return holder(l) == idB })
	takeover := time.Since(heldAt)
	close(tookOver)
	took := e.waitConverged(t, heldAt)
	// A hang bound from configuration: replica-a gives up its held renewal
	// at the renew deadline (10 s) and its writes with it.
	select {
	case <-a.Exited():
	case <-time.After(time.Minute):
		t.Fatalf("replica-a still running a minute after its renewals stopped:%s", a.LogTail(20))
	}
	if code := a.State().ExitCode(); code != 1 || logLine(a.Process, leader.ErrLostLease.Error()) == "" {
		t.Errorf("replica-a exited with %d, want 1 and %q in its log:%s", code, leader.ErrLostLease, a.LogTail(20))
	}
	record(t, "leader's renewals held by a slow webhook: until the standby holds the Lease", takeover)
	record(t, "leader's renewals held by a slow webhook, 300 Bars: from then to convergence", took)

	// The audit log, by user agent: main.go names the replica (POD_NAME)
	// in it, for the Lease client too.
	writes, err := e.cluster.AuditedWrites(func(ev localcluster.AuditEvent) bool {
		return ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300 && strings.HasPrefix(ev.UserAgent, "bar-controller/")
	})
	if err != nil {
		t.Fatal(err)
	}
	var firstB, lastA time.Time
	var nA, nB int
	for _, w := range writes {
		switch {
		case strings.Contains(w.UserAgent, " replica-a"):
			nA++
			if w.Completed.After(lastA) {
				lastA = w.Completed
			}
		case strings.Contains(w.UserAgent, " replica-b"):
			nB++
			if firstB.IsZero() || w.Received.Before(firstB) {
				firstB = w.Received
			}
		}
	}
	t.Logf("replica-a made %d writes, the last completed %v after its renewals were held; replica-b made %d, the first received %v after",
		nA, lastA.Sub(heldAt).Round(time.Millisecond), nB, firstB.Sub(heldAt).Round(time.Millisecond))
	for _, what := range []string{"Failed to renew lease", "Lost the lease"} {
		if line := logLine(a.Process, what); line != "" {
			t.Logf("replica-a %v after its renewals were held: %s", logTime(t, line).Sub(heldAt).Round(time.Millisecond), line)
		}
	}
	// The case needs replica-a to have been writing, with writes under
	// way after its renewals were held, and replica-b to have taken over.
	if nA == 0 || nB == 0 || underWay.Load() == 0 {
		t.Fatalf("replica-a made %d writes (%d under way after its renewals were held), replica-b made %d: the case did not happen as meant", nA, underWay.Load(), nB)
	}
	var late []string
	for _, w := range writes {
		if strings.Contains(w.UserAgent, " replica-a") && !w.Completed.Before(firstB) {
			late = append(late, fmt.Sprintf("%s (%v after replica-b's first write)", w, w.Completed.Sub(firstB).Round(time.Millisecond)))
		}
	}
	if len(late) > 0 {
		t.Errorf("replica-a, which had lost the Lease, wrote %d times after replica-b's first write:\n%s", len(late), strings.Join(late, "\n"))
	}
}

// serviceAccountKubeconfig makes ServiceAccount name in the namespace, lets
// it do anything (RBAC is not what these cases test; an identity of its
// own, which webhooks and APF can tell apart, is), and returns a
// kubeconfig for it.
func (e *env) serviceAccountKubeconfig(t *testing.T, name string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "faults-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: e.ns, Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, name+".kubeconfig")
	if _, err := e.cluster.WriteKubeconfig(path, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

// startReplica starts the controller as startController does, with
// POD_NAME set to name as the Deployment's downward API sets it: the
// replica's name in its Lease identity and its user agent.
func (e *env) startReplica(t *testing.T, name string, flags ...string) *controller {
	t.Helper()
	addrs, err := localcluster.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + e.cluster.Kubeconfig,
		"--metrics-bind-address=" + addrs[0], "--health-probe-bind-address=" + addrs[1]}, flags...)
	p, err := localcluster.StartProcess(name, controllerBinary, filepath.Join(e.dir, name+".log"), []string{"POD_NAME=" + name}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return &controller{Process: p, metricsURL: "http://" + addrs[0] + "/metrics", readyzURL: "http://" + addrs[1] + "/readyz"}
}

// waitFor polls cond every 50 ms for up to timeout, a hang bound.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}
