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

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The controller-runtime peer (test/bench/peer, a module of its own):
// the same job written as a controller-runtime user writes it, measured
// in the same rows, against the same floors, as bar-controller.

// peerScenario is s run with the peer's binary: its own namespaces and
// process names, and none of bar-controller's extra flags.
func (s scenario) peerScenario() scenario {
	p := s
	p.controller, p.peer, p.isPeer, p.extraArgs = s.peer, "", true, nil
	return p
}

// runName names a run's namespace and process: bench-<i> for
// bar-controller, peer-<i> for the peer; warmup-bench and warmup-peer for
// the warm-up's (row.go).
func (s scenario) runName(i int) string {
	switch {
	case s.warm && s.isPeer:
		return "warmup-peer"
	case s.warm:
		return "warmup-bench"
	case s.isPeer:
		return fmt.Sprintf("peer-%d", i)
	}
	return fmt.Sprintf("bench-%d", i)
}

// informers is how many informers the scenario's controller runs:
// bar-controller's controllerInformers, the peer's two (Bars and
// Deployments, its manager's cache).
func (s scenario) informers() int {
	if s.isPeer {
		return 2
	}
	return controllerInformers
}

// grantPeer grants the controller's ServiceAccount what the peer's
// kubebuilder markers ask for (test/bench/peer/reconciler.go), beyond
// what artifacts/install gives bar-controller: update, where
// bar-controller only patches (server-side apply). The peer then runs
// under the same identity, in the same API Priority and Fairness level.
func grantPeer(ctx context.Context, kube kubernetes.Interface) error {
	const name = "bar-controller-bench-peer"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"barcontroller.dev"}, Resources: []string{"bars"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"barcontroller.dev"}, Resources: []string{"bars/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: localcluster.ControllerServiceAccount,
			Namespace: localcluster.ControllerNamespace}},
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// peerRatio is the peer's converge ratio. The peer has no floors of its
// own: it divides by its row's, all of them, the same ones bar-controller
// divides by (a copy of them once missed the last floor).
func peerRatio(r result) float64 {
	return median(r.Peer.Controllers).Seconds() / median(r.Floors).Seconds()
}

// peerTable puts bar-controller's rows beside the peer's.
func peerTable(rs []result) string {
	var b strings.Builder
	b.WriteString("| Bars | floor (median) | converge: bar-controller / peer (medians) | ÷ floor | writes per Bar | idle writes (restart, 2 resyncs) | peak RSS | live heap | CPU | API server + etcd CPU (medians) |\n")
	b.WriteString("| ---: | ---: | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		p := r.Peer
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "| %d | %s | %s / %s | %.2f× / %.2f× | %.2f / %.2f | %s, %s / %s, %s | %.1f / %.1f MB | %.1f / %.1f MB | %.1f / %.1f s | %s / %s |\n",
			r.N, secs(median(r.Floors)), secs(median(r.Controllers)), secs(median(p.Controllers)), ratio(r), peerRatio(r),
			writesPerBar(r), writesPerBar(*p), trimFloat(r.RestartWrites), trimFloat(r.IdleWrites), trimFloat(p.RestartWrites), trimFloat(p.IdleWrites),
			mb(r.PeakRSS), mb(p.PeakRSS), mb(r.Heap.Live), mb(p.Heap.Live), r.CPU.Seconds(), p.CPU.Seconds(),
			secs(median(r.ControllerServerCPU)), secs(median(p.ControllerServerCPU)))
	}
	return b.String()
}

func writesPerBar(r result) float64 {
	return r.DeploymentWrites + r.StatusWrites + r.EventWrites + r.OtherWrites
}

// peerSection is the report's part on the peer; empty without one.
func peerSection(rs []result) string {
	var with []result
	for _, r := range rs {
		if r.Peer != nil {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(`
## Beside a controller-runtime peer

The same job written as a controller-runtime user writes it
(test/bench/peer, controller-runtime v0.25, a module of its own: its
client, cache and ` + "`Owns`" + `, CreateOrUpdate and ` + "`Status().Update`" + `, 32
workers, bar-controller's ceiling), run in the same rows against the same
floors, under the same ServiceAccount (with the update verbs it needs),
each round's two runs in turn (bar-controller first in even rounds, the
peer first in odd ones). Its writes include the ones the API server
refused (409 Conflict: a status update from a stale cache), as
bar-controller's would.

`)
	b.WriteString(peerTable(with))
	b.WriteString("\n")
	for _, r := range with {
		p := r.Peer
		fmt.Fprintf(&b, "- %d Bars: converge %s; writes per Bar %s; idle writes %s; peak RSS %s; live heap %s; CPU %s; API server CPU %s\n", r.N,
			compareRuns(r.Controllers, p.Controllers), compareCounts(writesPerBar(r), writesPerBar(*p), "%.2f"),
			compareCounts(r.RestartWrites+r.IdleWrites, p.RestartWrites+p.IdleWrites, "%g"), compareCounts(mb(r.PeakRSS), mb(p.PeakRSS), "%.1f MB"),
			compareCounts(mb(r.Heap.Live), mb(p.Heap.Live), "%.1f MB"), compareCounts(r.CPU.Seconds(), p.CPU.Seconds(), "%.1f s"),
			compareRuns(r.ControllerServerCPU, p.ControllerServerCPU))
	}
	return b.String()
}

// compareCounts says whether bar-controller's figure (ours) is below the
// peer's (less is better in every column it is used for), as the report
// prints them: what prints the same is even, not ahead.
func compareCounts(ours, peer float64, format string) string {
	o, p := fmt.Sprintf(format, ours), fmt.Sprintf(format, peer)
	switch {
	case o == p:
		return "even (" + o + " both)"
	case ours < peer:
		return "ahead"
	}
	return "**behind**"
}

// compareRuns says whether bar-controller's runs (ours) were ahead of the
// peer's, by their medians; a difference smaller than the spread of
// either's own runs is not one the row measured, and is said to be even.
func compareRuns(ours, peer []time.Duration) string {
	d := median(ours) - median(peer)
	noise := max(slices.Max(ours)-slices.Min(ours), slices.Max(peer)-slices.Min(peer))
	switch {
	case d.Abs() < noise:
		return fmt.Sprintf("even (%+.1f s, within the runs' own spread of %.1f s)", d.Seconds(), noise.Seconds())
	case d < 0:
		return "ahead"
	}
	return "**behind**"
}
