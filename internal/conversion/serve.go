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

package conversion

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/barcontroller/bar-controller/internal/metrics"
	"github.com/barcontroller/bar-controller/internal/serving"
	"github.com/barcontroller/bar-controller/internal/webhookcert"
)

// How long a request may hold a replica (limit.go): a review of at most
// maxRequestBytes crosses a cluster's network in well under a second, and
// is converted in milliseconds, while the API server waits 10 s for an
// answer. A caller slower than this is not the API server, or is one that
// gave up already.
//
// An idle connection is kept longer than serving's default: the API server
// converts in bursts (a list, a migration) and each new connection costs
// it a TLS handshake; another source's idle ones give way when the
// listener is full (serving.ConnLimits), so they cost no slot.
const (
	bodyTimeout   = 10 * time.Second
	answerTimeout = 15 * time.Second
	idleTimeout   = 30 * time.Second
)

// Server is the webhook as the controller runs it: the Converter over
// HTTPS, with the certificate a webhookcert.Keeper keeps.
type Server struct {
	keeper *webhookcert.Keeper
	addr   net.Addr
	stop   func()
}

// Start runs the certificate keeper and serves the webhook on
// o.BindAddress until Stop. It listens before it returns, so a busy port
// fails start-up. Start it before anything that reads Bars (the
// informers): with v1alpha1 objects still stored, the controller's own
// reads need a webhook that answers, its own included.
//
// ctx carries the logger; its end stops neither the keeper nor the server.
// A replica that was sent SIGTERM keeps converting until Stop, which the
// controller calls last: the API server may route to it until it has left
// the Service's endpoints.
func Start(ctx context.Context, o Options, cfg *rest.Config) (*Server, error) {
	// Clients of their own, so their requests are told apart in the API
	// server's audit log.
	c := rest.CopyConfig(cfg)
	c.UserAgent += "/conversion-webhook"
	kube, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("building the webhook certificate's Kubernetes client: %w", err)
	}
	ext, err := apiextensionsclient.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("building the webhook certificate's apiextensions client: %w", err)
	}
	return start(ctx, o, kube, ext)
}

func start(ctx context.Context, o Options, kube kubernetes.Interface, ext apiextensionsclient.Interface) (*Server, error) {
	keeper := &webhookcert.Keeper{
		Kube: kube, Extensions: ext,
		Namespace: o.SecretNamespace, SecretName: o.SecretName, CRDName: CRDName,
		Names:    o.CertNames,
		Validity: webhookcert.DefaultValidity, RotateBefore: webhookcert.DefaultRotateBefore,
		Period: o.CertSyncPeriod, Grace: o.CertGracePeriod,
	}
	// Until the keeper has loaded a pair, handshakes fail (GetCertificate
	// errs), and the API server retries with its next request: nothing is
	// served under a certificate the CRD does not trust.
	tlsConfig := &tls.Config{GetCertificate: keeper.GetCertificate, MinVersion: tls.VersionTLS12}
	addr, stopServing, err := serving.Listen(ctx, "conversion-webhook", o.BindAddress, handler(NewConverter(), o.APIServerCIDRs), tlsConfig, listenOptions(o.APIServerCIDRs)...)
	if err != nil {
		return nil, err
	}
	keeperCtx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { keeper.Run(keeperCtx) })
	metrics.SetConversionCertificateSource(func() *x509.Certificate { return servedLeaf(keeper) })
	return &Server{keeper: keeper, addr: addr, stop: func() {
		stopServing()
		metrics.SetConversionCertificateSource(nil)
		stopKeeper()
		wg.Wait()
	}}, nil
}

// handler is the webhook as it is served: c, the Converter, behind the
// body budget (limit.go), which leaves room to apiServer's addresses.
func handler(c http.Handler, apiServer []netip.Prefix) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, limited(newBudget(budgetBytes, addressShare, apiServer), c))
	return mux
}

// connLimits bound the webhook's connections. The API server holds one
// per conversion call in flight (HTTP/1.1) and keeps some open between
// calls; a call takes milliseconds, so 64 at once from one address is
// more than it needs. One refused at accept fails the call that dialled
// it: Go's transport retries no POST on a new connection. 256 in all hold
// about 15 MiB of heap at most over TLS (internal/serving's
// TestConnectionMemory: about 60 KiB each with a header just under the
// limit) and 32 MiB of kernel buffers (serving's socketBuffer), and take
// four addresses at their share to fill; then the connection whose caller
// moved least gives way (serving.ConnLimits), so only about 256
// addresses that each trickle one body can keep the API server out.
var connLimits = serving.ConnLimits{Total: 256, PerSource: 64}

// listenOptions are the webhook listener's bounds beyond serving's
// defaults; apiServer's addresses are trusted with connections.
func listenOptions(apiServer []netip.Prefix) []serving.Option {
	limits := connLimits
	limits.Trusted = apiServer
	return []serving.Option{serving.WithReadTimeout(bodyTimeout), serving.WithWriteTimeout(answerTimeout),
		serving.WithIdleTimeout(idleTimeout), serving.WithConnLimits(limits), serving.WithBodies()}
}

// servedLeaf is the certificate keeper serves, or nil: its expiry is a
// metric, which an alert watches (artifacts/monitoring).
func servedLeaf(keeper *webhookcert.Keeper) *x509.Certificate {
	pair, err := keeper.GetCertificate(nil)
	if err != nil {
		return nil
	}
	return pair.Leaf // tls.X509KeyPair fills it in
}

// Ready says whether the API server can call this replica: it serves a
// certificate that the CRD's caBundle trusts.
func (s *Server) Ready() error { return s.keeper.Ready() }

// Stop stops serving (requests in flight finish, for up to 5 s) and
// keeping the certificate.
func (s *Server) Stop() { s.stop() }
