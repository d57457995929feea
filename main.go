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

// Command bar-controller reconciles Bar custom resources into Deployments.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/apiauth"
	"github.com/barcontroller/bar-controller/internal/conversion"
	"github.com/barcontroller/bar-controller/internal/leader"
	"github.com/barcontroller/bar-controller/internal/logging"
	"github.com/barcontroller/bar-controller/internal/memory"
	"github.com/barcontroller/bar-controller/internal/metrics"
	"github.com/barcontroller/bar-controller/internal/probes"
	"github.com/barcontroller/bar-controller/internal/serving"
	"github.com/barcontroller/bar-controller/internal/shards"
	"github.com/barcontroller/bar-controller/internal/version"
	"github.com/barcontroller/bar-controller/internal/webhookcert"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

func main() {
	klog.InitFlags(nil)
	var opts options
	opts.addFlags(flag.CommandLine)
	flag.Parse()
	if opts.showVersion {
		version.Print(os.Stdout)
		return
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := logging.Setup(opts.loggingFormat); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	// Here and not in run: the policy is the process's, set once.
	memory.SetUp(klog.Background(), opts.gcHeadroom)
	ctx := klog.NewContext(signalContext(), klog.Background())
	if err := run(ctx, opts); err != nil {
		klog.FromContext(ctx).Error(err, "bar-controller failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, opts options) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting bar-controller", "version", version.Version(), "commit", version.Commit(), "namespace", opts.namespace)
	// Before any client or work queue exists: they pick up the providers.
	registry := metrics.NewRegistry()
	registry.MustRegister(metrics.BuildInfo(version.Version(), version.Commit(), goruntime.Version()))
	registry.MustRegister(webhookcert.Collectors()...)

	cfg, err := restConfig(opts)
	if err != nil {
		return err
	}
	// The Lease client's requests go before every other request of this
	// process when API Priority and Fairness rejects them: renewals share
	// the controller's priority level with its syncs, and a leader must
	// not lose its Lease to its own load (internal/leader/priority.go).
	// The Lease client's configuration is taken before the others learn
	// to yield.
	leaseCfg := rest.CopyConfig(cfg)
	// The adaptive limit learns from every write's answer: its wrapper is
	// the innermost (the first Wrap), so it times the API server and not a
	// wait for the Lease.
	var slots *adaptiveSlots
	if opts.adaptive {
		slots = newAdaptiveSlots(logger, opts.workers)
		cfg.Wrap(slots.Transport)
	}
	priority := leader.NewPriority()
	if opts.leaderElection.Enabled {
		cfg.Wrap(priority.Yield)
	}
	// Built-in types travel as protobuf, as kube-controller-manager's do:
	// smaller on the wire and cheaper to decode than JSON. Bars cannot
	// (custom resources have no protobuf encoding), so their client keeps
	// JSON.
	kubeCfg := rest.CopyConfig(cfg)
	kubeCfg.ContentType = runtime.ContentTypeProtobuf
	kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kubeClient, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return fmt.Errorf("building Kubernetes client: %w", err)
	}
	barClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building Bar client: %w", err)
	}

	// The conversion webhook starts before the informers and stops last
	// (deferred first). Before: the API server converts every Bar still
	// stored in another version, on this replica's reads too, through a
	// webhook that may be this one. Last: a terminating replica keeps
	// answering while it leaves the Service's endpoints.
	var webhook *conversion.Server
	if opts.webhook.Enabled() {
		if webhook, err = conversion.Start(ctx, opts.webhook, cfg); err != nil {
			return err
		}
		defer webhook.Stop()
	}
	if opts.webhook.Only {
		return serveWebhookOnly(ctx, opts, cfg, registry, webhook)
	}

	metaClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building metadata client: %w", err)
	}

	clients := clients{kube: kubeClient, bars: barClient, meta: metaClient}
	if opts.shards > 1 {
		electionClient, err := newElectionClient(leaseCfg, priority)
		if err != nil {
			return err
		}
		return runSharded(ctx, opts, cfg, electionClient, registry, clients, slots, webhook)
	}
	controller, caches, err := newController(ctx, opts, clients, nil)
	if err != nil {
		return err
	}
	if slots != nil {
		controller.UseSlots(slots)
	}

	var watchdog *leaderelection.HealthzAdaptor
	if opts.leaderElection.Enabled {
		// /healthz fails if the leader has not renewed for this long
		// past its lease: it is stuck, and a restart lets a standby lead.
		watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	stopMetrics, err := serveMetrics(ctx, opts, cfg, metrics.Handler(registry, opts.profiling))
	if err != nil {
		return err
	}
	defer stopMetrics()
	ready := probes.CachesSynced(controller.HasSynced)
	if webhook != nil {
		// Not the caches: they wait for this webhook (probes.Handler).
		ready = webhook.Ready
	}
	// Probes stay plain HTTP: the kubelet calls them, with no token.
	stopHealth, err := serving.Serve(ctx, "health", opts.healthAddress, probes.Handler(ready, watchdog), nil, serving.ForProbes())
	if err != nil {
		return err
	}
	defer stopHealth()

	// Standbys start the informers too, so a takeover begins warm. Start
	// does not block; Shutdown waits for the informers' goroutines, which
	// only end once their stop channel is closed. That must happen however
	// run returns: after a lost lease there is no signal, and waiting for
	// one would leave the process hanging instead of restarting.
	informerCtx, stopInformers := context.WithCancel(ctx)
	caches.start(informerCtx.Done())
	defer caches.shutdown(logger)
	defer stopInformers() // runs first

	work := func(ctx, shutdown context.Context) error { return controller.Run(ctx, shutdown, opts.workers) }
	if !opts.leaderElection.Enabled {
		// Nothing takes the right to write away: a signal only asks the
		// syncs in progress to finish (within syncTimeout).
		return work(context.WithoutCancel(ctx), ctx)
	}
	if opts.leaderElection.Namespace == "" {
		opts.leaderElection.Namespace = leader.DefaultNamespace()
	}
	electionClient, err := newElectionClient(leaseCfg, priority)
	if err != nil {
		return err
	}
	// Fenced against sharded replicas of this controller, both ways (a
	// rollout to --shards=N and back): each waits for the other's Leases.
	return shards.RunUnsharded(ctx, electionClient, kubeClient, opts.leaderElection, watchdog, work)
}

// newElectionClient is the client of the Lease renewals: one of their
// own, so a busy controller's rate limiter can never delay them past the
// renew deadline, and first when the API server rejects requests (see
// leaseCfg in run).
func newElectionClient(leaseCfg *rest.Config, priority *leader.Priority) (kubernetes.Interface, error) {
	electionCfg := rest.CopyConfig(leaseCfg)
	electionCfg.UserAgent += "/leader-election"
	electionCfg.Wrap(priority.First)
	return kubernetes.NewForConfig(electionCfg)
}

// runSharded runs this replica's share of --shards shards
// (internal/shards, docs/sharding.md). Each shard it holds is a
// controller of its own, with its own caches, queue and workers, started
// when the shard's Lease is won and stopped when the shard is given up or
// its Lease lost; its writes are fenced by that Lease as a single
// leader's are. Nothing is warm before: a shard's caches hold only that
// shard, and which shards a replica will hold is not known in advance.
func runSharded(ctx context.Context, opts options, cfg *rest.Config, electionClient kubernetes.Interface,
	registry *prometheus.Registry, cl clients, slots *adaptiveSlots, webhook *conversion.Server) error {
	logger := klog.FromContext(ctx)
	if opts.leaderElection.Namespace == "" {
		opts.leaderElection.Namespace = leader.DefaultNamespace()
	}
	replica, err := leader.ReplicaName()
	if err != nil {
		return err
	}
	identity, err := leader.NewIdentity()
	if err != nil {
		return err
	}
	work := func(leading, shutdown context.Context, s shards.Shard, synced func()) error {
		controller, caches, err := newController(klog.NewContext(leading, logger.WithValues("shard", s)), opts, cl, &s)
		if err != nil {
			return err
		}
		if slots != nil {
			controller.UseSlots(slots)
		}
		informerCtx, stopInformers := context.WithCancel(leading)
		caches.start(informerCtx.Done())
		defer caches.shutdown(logger)
		defer stopInformers() // runs first
		defer metrics.WatchShardBars(s.String(), func() int { return len(controller.barsIndexer.ListKeys()) })()
		defer metrics.ForgetQueue(controller.queueName())
		go func() {
			if cache.WaitForCacheSync(informerCtx.Done(), controller.HasSynced) {
				synced()
			}
		}()
		return controller.Run(leading, shutdown, opts.workers)
	}
	coordinator := shards.New(electionClient, opts.leaderElection, opts.shards, identity, work)
	metrics.SetShards(opts.shards)

	stopMetrics, err := serveMetrics(ctx, opts, cfg, metrics.Handler(registry, opts.profiling))
	if err != nil {
		return err
	}
	defer stopMetrics()
	ready := coordinator.Ready
	if webhook != nil {
		ready = webhook.Ready // as in run
	}
	stopHealth, err := serving.Serve(ctx, "health", opts.healthAddress, probes.Handler(ready, nil, coordinator.Status), nil, serving.ForProbes())
	if err != nil {
		return err
	}
	defer stopHealth()
	logger.Info("Sharded: taking a fair share of the shards", "shards", opts.shards, "replica", replica)
	// The Pod owns its member Lease if both are in one namespace (an
	// owner reference names no namespace) and the downward API says
	// which Pod this is.
	var pod *metav1.OwnerReference
	if uid := os.Getenv("POD_UID"); uid != "" && os.Getenv("POD_NAMESPACE") == opts.leaderElection.Namespace {
		pod = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: replica, UID: types.UID(uid)}
	}
	return coordinator.Run(ctx, replica, pod)
}

// serveWebhookOnly is a replica that only converts: its readiness is the
// webhook's, its metrics are the webhook's and the process's, and it runs
// until a signal. With nothing watched and nothing synced, it has no
// leader election, no work and no liveness to lose.
func serveWebhookOnly(ctx context.Context, opts options, cfg *rest.Config, registry *prometheus.Registry, webhook *conversion.Server) error {
	stopMetrics, err := serveMetrics(ctx, opts, cfg, metrics.Handler(registry, opts.profiling))
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopHealth, err := serving.Serve(ctx, "health", opts.healthAddress, probes.Handler(webhook.Ready, nil), nil, serving.ForProbes())
	if err != nil {
		return err
	}
	defer stopHealth()
	klog.FromContext(ctx).Info("Serving only the conversion webhook", "address", opts.webhook.BindAddress)
	<-ctx.Done()
	return nil
}

// serveMetrics serves h on the metrics address, by default over HTTPS and
// only to callers the API server authorizes (internal/apiauth).
func serveMetrics(ctx context.Context, opts options, cfg *rest.Config, h http.Handler) (func(), error) {
	if !opts.metricsSecure {
		return serving.Serve(ctx, "metrics", opts.metricsAddress, h, nil, serving.ForMetrics())
	}
	client, err := kubernetes.NewForConfig(metricsAuthConfig(cfg, apiauth.DefaultOptions()))
	if err != nil {
		return nil, fmt.Errorf("building the metrics authorization client: %w", err)
	}
	filter := apiauth.New(client, apiauth.DefaultOptions())
	tlsConfig, err := serving.TLSConfig(opts.metricsCertDir, "bar-controller-metrics")
	if err != nil {
		return nil, err
	}
	return serving.Serve(ctx, "metrics", opts.metricsAddress, filter.Wrap(h), tlsConfig, serving.ForMetrics())
}

// metricsAuthConfig is the client configuration of the metrics endpoint's
// reviews: a client of their own, so that they never wait in client-go
// behind the controller's requests, nor its requests behind them. Its user
// agent tells them apart in the API server's logs and audit. Its
// client-side limit is the filter's own bounds again (every lane at full
// rate), a second guard should the filter ever leak: what any scraper can
// make the controller send stays bounded whatever --kube-api-qps says.
func metricsAuthConfig(cfg *rest.Config, o apiauth.Options) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = "bar-controller/" + version.Version() + " (metrics-auth)"
	c.QPS = float32(o.Rate())
	c.Burst = o.Burst()
	c.RateLimiter = nil
	c.Timeout = o.Timeout
	return c
}

// informerShutdownTimeout bounds how long an exiting controller waits for
// its informers to stop.
const informerShutdownTimeout = 5 * time.Second

// shutdownInformers waits for the informers' goroutines to end, but not for
// long. A reflector backing off after a failed WatchList sleeps out its delay
// (up to 30 s) before it looks at its stop channel again (the retry in
// Reflector.watchList, tools/cache/reflector.go), and a process that is
// exiting anyway must not outlast the grace period the kubelet gives it.
func shutdownInformers(logger klog.Logger, timeout time.Duration, factories ...interface{ Shutdown() }) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, f := range factories {
			wg.Go(f.Shutdown)
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		logger.Info("Informers still stopping (a reflector is backing off); exiting without waiting for them", "waited", timeout)
	}
}

// signalContext is cancelled on the first SIGINT or SIGTERM, which starts a
// graceful shutdown; a second signal exits at once.
func signalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		cancel()
		<-c
		os.Exit(1)
	}()
	return ctx
}
