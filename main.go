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
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
	"github.com/barcontroller/bar-controller/internal/version"
	"github.com/barcontroller/bar-controller/internal/webhookcert"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
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

	// Deployments are watched twice, so that the cache holds only what the
	// controller reads, and each Deployment once. Whole: the ones with the
	// managed-by label newDeployment sets, to compare with what their Bars
	// want. Metadata only (the API server sends nothing else): every other
	// Deployment, so that one that stands in a Bar's way is seen, and never
	// written to, and its removal wakes that Bar. Unrelated Deployments
	// then cost their name, UID and controller reference
	// (trimDeploymentMetadata), not a decoded Deployment; a Deployment
	// moves from one cache to the other when its label is added or removed.
	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, opts.resyncPeriod,
		kubeinformers.WithNamespace(opts.namespace), kubeinformers.WithTransform(trimDeployment),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = managedSelector
		}))
	metaInformerFactory := metadatainformer.NewFilteredSharedInformerFactory(metaClient, 0, opts.namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = othersSelector
	})
	deploymentMeta := metaInformerFactory.ForResource(appsv1.SchemeGroupVersion.WithResource("deployments"))
	if err := deploymentMeta.Informer().SetTransform(trimDeploymentMetadata); err != nil {
		return err
	}
	barInformerFactory := informers.NewSharedInformerFactoryWithOptions(barClient, opts.resyncPeriod,
		informers.WithNamespace(opts.namespace), informers.WithTransform(trimBar))
	controller, err := NewController(ctx, kubeClient, barClient,
		kubeInformerFactory.Apps().V1().Deployments(), deploymentMeta,
		barInformerFactory.Barcontroller().V1().Bars())
	if err != nil {
		return err
	}
	if err := controller.Trace(opts.trace); err != nil {
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
	kubeInformerFactory.Start(informerCtx.Done())
	metaInformerFactory.Start(informerCtx.Done())
	barInformerFactory.Start(informerCtx.Done())
	defer shutdownInformers(logger, informerShutdownTimeout, kubeInformerFactory, metaInformerFactory, barInformerFactory)
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
	// Lease renewals get a client of their own, so a busy controller's
	// rate limiter can never delay them past the renew deadline, and go
	// first when the API server rejects them (see leaseCfg above).
	electionCfg := leaseCfg
	electionCfg.UserAgent += "/leader-election"
	electionCfg.Wrap(priority.First)
	electionClient, err := kubernetes.NewForConfig(electionCfg)
	if err != nil {
		return err
	}
	return leader.Run(ctx, electionClient, opts.leaderElection, watchdog, work)
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

func restConfig(opts options) (*rest.Config, error) {
	// The default loading rules read $KUBECONFIG and ~/.kube/config, and
	// fall back to the in-cluster service account when neither exists.
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	overrides.ClusterInfo.Server = opts.master
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading client configuration: %w", err)
	}
	cfg.QPS = float32(opts.qps)
	cfg.Burst = opts.burst
	// An explicit false keeps what the kubeconfig says (disable-compression).
	cfg.DisableCompression = cfg.DisableCompression || opts.noCompression
	replica, err := leader.ReplicaName()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = version.UserAgent(replica)
	return cfg, nil
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
