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

package realnode

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// network is the Pods' network: a subnet on bridgeName, whose first
// address (the gateway) belongs to this machine, plus the cluster's
// "kubernetes" Service IP, also held by the bridge.
type network struct {
	Subnet    netip.Prefix
	Gateway   netip.Addr
	ServiceIP netip.Addr
}

func newNetwork(subnet, serviceIP string) (network, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return network{}, err
	}
	svc, err := netip.ParseAddr(serviceIP)
	if err != nil {
		return network{}, err
	}
	p = p.Masked()
	return network{Subnet: p, Gateway: p.Addr().Next(), ServiceIP: svc}, nil
}

// firstPodIP leaves the low addresses of the subnet to the host.
func (n network) firstPodIP() netip.Addr {
	a := n.Gateway
	for range 9 {
		a = a.Next()
	}
	return a
}

// createBridge makes the bridge and gives it the gateway and Service
// addresses. Traffic from a Pod to either is delivered to this machine
// locally: nothing is forwarded, and the host's routes do not change
// beyond the subnet's own link route.
//
// The bridge gets a MAC of its own (bridgeMAC), set at creation. Without
// one, Linux gives a bridge the lowest MAC among its ports and changes it
// as Pods come and go; a Pod whose ARP entry for the gateway names a MAC
// that has gone can send nothing to this machine until the entry is
// resolved again (a known cause of container network stalls: CNI's bridge
// plugin and netavark set the MAC of bridges they create for this reason).
// On this kernel this machine's own ARP request, sent when the bridge's
// MAC changes and it next talks to the Pod, heals the entry at once
// (0.06-0.2 s in a private network namespace), so the 10-40 s stalls of
// docs/measurements/tests-and-real-node.md are not this; a fixed MAC takes it
// out of the question, and each node test checks the MAC never changed. The
// bridge is made here, before the plugin first runs, so the plugin leaves its
// MAC alone.
func (n network) createBridge() error {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, HardwareAddr: bridgeMAC(n.Gateway)}}
	if err := netlink.LinkAdd(br); err != nil {
		return err
	}
	for _, a := range []netip.Prefix{netip.PrefixFrom(n.Gateway, n.Subnet.Bits()), netip.PrefixFrom(n.ServiceIP, n.ServiceIP.BitLen())} {
		addr, err := netlink.ParseAddr(a.String())
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(br, addr); err != nil {
			return err
		}
	}
	return netlink.LinkSetUp(br)
}

// bridgeMAC is a locally administered unicast MAC made of the gateway's
// address: 0a:58 and the four bytes of the IPv4 address, as the CNI bridge
// plugin and kubenet derive theirs.
func bridgeMAC(gateway netip.Addr) net.HardwareAddr {
	ip := gateway.As4()
	return net.HardwareAddr{0x0a, 0x58, ip[0], ip[1], ip[2], ip[3]}
}

// forwarder relays TCP connections to the API server. There is no
// kube-proxy on this node, so the "kubernetes" Service IP that client-go's
// in-cluster configuration dials (KUBERNETES_SERVICE_HOST, set by the
// kubelet) is answered here, on the bridge, and relayed to the API server
// on loopback. TLS passes through untouched: the Pod verifies the API
// server's own certificate, which names the Service IP.
type forwarder struct {
	ln     net.Listener
	target string
}

func startForwarder(listen, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, target: target}
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go relay(c, f.target)
	}
}

func relay(c net.Conn, target string) {
	defer c.Close()
	var d net.Dialer
	up, err := d.DialContext(context.Background(), "tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close, so the other side sees EOF and finishes too.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// Close stops accepting. Connections in flight end when either side
// closes them; the node closes its side by stopping the Pods first.
func (f *forwarder) Close() {
	_ = f.ln.Close()
}
