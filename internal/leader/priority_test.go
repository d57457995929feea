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

package leader

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// These tests run real client-go clientsets, wired as main.go wires them,
// against an HTTP server that plays API Priority and Fairness: what is
// tested is their transports, which the generated fake clientsets leave
// out. The server records every request it was sent, in order.

// apfServer answers Lease PUTs with 429 (and the Retry-After APF sends
// once its priority level is busy) while reject says so, and everything
// else with 200.
type apfServer struct {
	*httptest.Server
	mu       sync.Mutex
	seen     []string
	reject   func(n int) bool // n: how many Lease PUTs came before
	leaseDur time.Duration    // how long a Lease PUT takes
	leases   int
}

func newAPFServer(t *testing.T, reject func(n int) bool) *apfServer {
	s := &apfServer{reject: reject}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lease := strings.Contains(r.URL.Path, "/leases/")
		s.mu.Lock()
		n := s.leases
		if lease {
			s.leases++
		}
		rejected := lease && s.reject(n)
		what := r.Method + " " + r.URL.Path
		if rejected {
			what += " 429"
		}
		s.seen = append(s.seen, what)
		dur := s.leaseDur
		s.mu.Unlock()
		if rejected {
			w.Header().Set("Retry-After", "4")
			http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
			return
		}
		var obj any = &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}}
		if lease {
			time.Sleep(dur)
			obj = &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *apfServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// clients are the Lease client and another one, as main.go makes them.
func (s *apfServer) clients(t *testing.T) (p *Priority, lease, other kubernetes.Interface) {
	t.Helper()
	p = NewPriority()
	cfg := &rest.Config{Host: s.URL, QPS: -1}
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.Wrap(p.First)
	cfg.Wrap(p.Yield)
	return p, kubernetes.NewForConfigOrDie(leaseCfg), kubernetes.NewForConfigOrDie(cfg)
}

// waitHeld returns once a rejected Lease request holds the others: the
// server has answered 429 a moment before the client has the answer.
func waitHeld(p *Priority) {
	for {
		p.mu.Lock()
		held := p.rejected > 0
		p.mu.Unlock()
		if held {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

const (
	leasePath      = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/bar-controller"
	deploymentPath = "/apis/apps/v1/namespaces/ns/deployments/d"
)

func renewLease(ctx context.Context, c kubernetes.Interface) error {
	_, err := c.CoordinationV1().Leases("ns").Update(ctx,
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bar-controller", Namespace: "ns"}}, metav1.UpdateOptions{})
	return err
}

func getDeployment(ctx context.Context, c kubernetes.Interface) error {
	_, err := c.AppsV1().Deployments("ns").Get(ctx, "d", metav1.GetOptions{})
	return err
}

// A rejected renewal is sent again after leaseRetryDelay, not after the
// Retry-After (4 s here): two rejections cost 0.2 s of a 10 s renew
// deadline, not 8 s.
func TestLeaseRequestRetriedSoonAfterRejection(t *testing.T) {
	s := newAPFServer(t, func(n int) bool { return n < 2 })
	_, lease, _ := s.clients(t)
	start := time.Now()
	if err := renewLease(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the renewal took %v, want about %v", took, 2*leaseRetryDelay)
	}
	want := []string{"PUT " + leasePath + " 429", "PUT " + leasePath + " 429", "PUT " + leasePath}
	if got := s.requests(); !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// While a renewal is being rejected, no other request starts: the one
// asked for during the rejections is sent after the renewal got through.
func TestOtherRequestsWaitWhileLeaseRejected(t *testing.T) {
	s := newAPFServer(t, func(n int) bool { return n < 3 })
	p, lease, other := s.clients(t)
	renewed := make(chan error, 1)
	go func() { renewed <- renewLease(t.Context(), lease) }()
	waitHeld(p)
	if err := getDeployment(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if err := <-renewed; err != nil {
		t.Fatal(err)
	}
	want := []string{"PUT " + leasePath + " 429", "PUT " + leasePath + " 429", "PUT " + leasePath + " 429", "PUT " + leasePath,
		"GET " + deploymentPath}
	if got := s.requests(); !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A renewal that is slow but not rejected holds nothing up.
func TestSlowLeaseRequestHoldsNothing(t *testing.T) {
	s := newAPFServer(t, func(int) bool { return false })
	s.leaseDur = time.Second
	_, lease, other := s.clients(t)
	renewed := make(chan error, 1)
	go func() { renewed <- renewLease(t.Context(), lease) }()
	// Until the server has the PUT.
	for len(s.requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := getDeployment(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > s.leaseDur/2 {
		t.Errorf("the other request took %v while a Lease request took %v: it waited for it", took, s.leaseDur)
	}
	if err := <-renewed; err != nil {
		t.Fatal(err)
	}
	want := []string{"PUT " + leasePath, "GET " + deploymentPath}
	if got := s.requests(); !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A request waiting behind a rejected renewal gives up, unsent, when its
// own context ends; a renewal rejected for longer than leaseRetryFor
// holds the others no longer (client-go waits out the Retry-After with
// nothing held); and a renewal rejected until its context ends fails.
func TestWaitsAreBounded(t *testing.T) {
	s := newAPFServer(t, func(int) bool { return true })
	p, lease, other := s.clients(t)
	leaseCtx, cancelLease := context.WithCancel(t.Context())
	renewed := make(chan error, 1)
	heldAt := time.Now()
	go func() { renewed <- renewLease(leaseCtx, lease) }()
	waitHeld(p)

	ctx, cancel := context.WithTimeout(t.Context(), leaseRetryFor/4)
	defer cancel()
	if err := getDeployment(ctx, other); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the request waiting behind the renewal returned %v, want %v", err, context.DeadlineExceeded)
	}
	if err := getDeployment(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(heldAt); took > leaseRetryFor+time.Second/2 {
		t.Errorf("a rejected renewal held the other requests for %v, want at most about %v", took, leaseRetryFor)
	}
	cancelLease()
	if err := <-renewed; err == nil || !(apierrors.IsTooManyRequests(err) || errors.Is(err, context.Canceled)) {
		t.Errorf("the renewal returned %v, want the 429 or %v", err, context.Canceled)
	}
	// Rejected renewals, every leaseRetryDelay for leaseRetryFor, then
	// the one GET that waited for them, and nothing else.
	got := s.requests()
	var puts, gets int
	for i, r := range got {
		switch r {
		case "PUT " + leasePath + " 429":
			puts++
		case "GET " + deploymentPath:
			gets++
			if i != len(got)-1 {
				t.Errorf("the GET was sent while the renewal was being retried: request %d of %d", i+1, len(got))
			}
		default:
			t.Errorf("unexpected request %q", r)
		}
	}
	if want := int(leaseRetryFor / leaseRetryDelay); gets != 1 || puts < want-2 || puts > want+1 {
		t.Errorf("%d rejected renewals and %d GETs, want about %d and 1:\n%s", puts, gets, want, strings.Join(got, "\n"))
	}
}
