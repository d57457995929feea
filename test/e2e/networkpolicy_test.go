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
	"net/netip"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// peer is where a connection comes from: an address, and for a Pod its
// namespace's and its own labels.
type peer struct {
	name      string
	ip        string
	namespace map[string]string // nil: not a Pod (a node, the API server, outside)
	pod       map[string]string
}

func pod(name, ip, ns string, podLabels map[string]string) peer {
	return peer{name: name, ip: ip, namespace: map[string]string{"kubernetes.io/metadata.name": ns}, pod: podLabels}
}

// TestNetworkPolicyAdmits reads artifacts/networkpolicy as the
// NetworkPolicy API defines it (the ingress rules of a policy that
// selects the Pod: a connection is admitted if one rule's ports hold its
// port and one of its peers matches the source; an ipBlock matches an
// address in its cidr and in none of its excepts; a namespaceSelector
// and a podSelector in one peer must both match) and checks who reaches
// which port of a replica: the API server from a node's address in
// either family, and no Pod, on the webhook port; on the metrics port,
// only Prometheus's Pods in the monitoring namespace, and no Pod that a
// tenant labels like them elsewhere.
//
// This is the policy's meaning, not its enforcement: no network plugin
// runs here (TestNetworkPolicyManifest has the API server accept it).
// Before the fix an API server calling from an IPv6 address was refused
// (0.0.0.0/0 holds IPv4 addresses only), and any namespace's Pod
// labelled barcontroller.dev/metrics-scraper=true was admitted to the
// metrics port.
func TestNetworkPolicyAdmits(t *testing.T) {
	var policy networkingv1.NetworkPolicy
	readManifest(t, filepath.Join(artifactsDir, "networkpolicy", "networkpolicy.yaml"), &policy)
	var deployment struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	readManifest(t, filepath.Join(artifactsDir, "install", "deployment.yaml"), &deployment)
	d := deployment.Spec.Template
	selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !selector.Matches(labels.Set(d.Labels)) {
		t.Fatal("the NetworkPolicy does not select the replicas' Pods")
	}
	ports := map[string]int32{}
	for _, p := range d.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}

	prometheus := map[string]string{"app.kubernetes.io/name": "prometheus", "prometheus": "k8s"}
	// A tenant's Pod with every label Prometheus's have, and the one the
	// old policy admitted.
	impostor := map[string]string{"app.kubernetes.io/name": "prometheus", "prometheus": "k8s", "barcontroller.dev/metrics-scraper": "true"}
	for _, tc := range []struct {
		from peer
		port string
		want bool
	}{
		{peer{name: "the API server, from an IPv4 node address", ip: "192.0.2.10"}, "webhook", true},
		{peer{name: "the API server, from an IPv6 node address", ip: "2001:db8::10"}, "webhook", true},
		{pod("a tenant's Pod (IPv4)", "10.244.3.7", "tenant", nil), "webhook", false},
		{pod("a tenant's Pod (IPv6)", "fd00:10:244:12::7", "tenant", nil), "webhook", false},
		{pod("Prometheus", "10.244.5.5", "monitoring", prometheus), "webhook", false},
		{pod("Prometheus (IPv4)", "10.244.5.5", "monitoring", prometheus), "metrics", true},
		{pod("Prometheus (IPv6)", "fd00:10:244:5::5", "monitoring", prometheus), "metrics", true},
		{pod("a tenant's Pod labelled as Prometheus", "10.244.3.8", "tenant", impostor), "metrics", false},
		{pod("another Pod in the monitoring namespace", "10.244.5.6", "monitoring", map[string]string{"app.kubernetes.io/name": "grafana"}), "metrics", false},
		{peer{name: "a node's address", ip: "192.0.2.11"}, "metrics", false},
	} {
		if got := admits(t, &policy, ports, tc.from, tc.port); got != tc.want {
			t.Errorf("%s to the %s port: admitted %v, want %v", tc.from.name, tc.port, got, tc.want)
		}
	}
}

// admits says whether policy admits a connection from p to the replica's
// port named port (its number in ports).
func admits(t *testing.T, policy *networkingv1.NetworkPolicy, ports map[string]int32, p peer, port string) bool {
	t.Helper()
	for _, rule := range policy.Spec.Ingress {
		portOK := len(rule.Ports) == 0
		for _, rp := range rule.Ports {
			if rp.Port == nil || rp.Port.StrVal == port || (rp.Port.StrVal == "" && rp.Port.IntVal == ports[port]) {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		if len(rule.From) == 0 {
			return true
		}
		for _, from := range rule.From {
			if peerMatches(t, policy.Namespace, from, p) {
				return true
			}
		}
	}
	return false
}

func peerMatches(t *testing.T, policyNS string, from networkingv1.NetworkPolicyPeer, p peer) bool {
	t.Helper()
	if from.IPBlock != nil {
		addr := netip.MustParseAddr(p.ip)
		block, err := netip.ParsePrefix(from.IPBlock.CIDR)
		if err != nil {
			t.Fatal(err)
		}
		if !block.Contains(addr) {
			return false
		}
		for _, e := range from.IPBlock.Except {
			if netip.MustParsePrefix(e).Contains(addr) {
				return false
			}
		}
		return true
	}
	if p.namespace == nil {
		return false // only an ipBlock matches what is not a Pod
	}
	match := func(s *metav1.LabelSelector, set map[string]string) bool {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatal(err)
		}
		return sel.Matches(labels.Set(set))
	}
	switch {
	case from.NamespaceSelector != nil && !match(from.NamespaceSelector, p.namespace):
		return false
	case from.NamespaceSelector == nil && p.namespace["kubernetes.io/metadata.name"] != policyNS:
		return false
	case from.PodSelector != nil && !match(from.PodSelector, p.pod):
		return false
	}
	return true
}
