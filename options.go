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
	"flag"
	"fmt"
	"path"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/barcontroller/bar-controller/internal/conversion"
	"github.com/barcontroller/bar-controller/internal/leader"
	"github.com/barcontroller/bar-controller/internal/shards"
	"github.com/barcontroller/bar-controller/internal/version"
)

// options are bar-controller's flags.

type options struct {
	kubeconfig     string
	master         string
	namespace      string
	workers        int
	adaptive       bool
	qps            float64
	burst          int
	noCompression  bool
	resyncPeriod   time.Duration
	metricsAddress string
	metricsSecure  bool
	metricsCertDir string
	profiling      bool
	healthAddress  string
	loggingFormat  string
	trace          string
	gcHeadroom     int
	leaderElection leader.Options
	shards         int
	webhook        conversion.Options
	showVersion    bool
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Without it: $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.")
	fs.StringVar(&o.master, "master", "", "The address of the Kubernetes API server. Overrides the server in the kubeconfig.")
	fs.StringVar(&o.namespace, "namespace", "", "Only watch Bars and Deployments in this namespace (RBAC can then be a Role). Empty: all namespaces.")
	// A worker spends nearly all of a sync waiting on the API server (an
	// apply, then a status write), so the number of syncs in flight is the
	// number of writes in flight. No fixed number is right: more converge
	// a cold start faster on a healthy API server (make bench, 2,000 Bars
	// on 2 cores: 2.2x the floor with 4, 1.75x with 16, 32 no better), but
	// slower where API Priority and Fairness rejects the controller (16
	// took 88 s and 15 timed-out syncs where 4 took 25 s and none,
	// test/faults). So by default the number follows the API server
	// (run.go, internal/adaptive), between 1 and --workers;
	// docs/measurements/benchmarks-converge-and-concurrency.md has the numbers.
	fs.IntVar(&o.workers, "workers", 32, "Most Bars synced in parallel: the ceiling of the adaptive limit, or the number with --adaptive-concurrency=false.")
	fs.BoolVar(&o.adaptive, "adaptive-concurrency", true, "Let the number of syncs and Event writes in flight follow the API server: grow while it answers quickly, shrink at once when it rejects (429) or queues. false: exactly --workers syncs and 4 Event writes.")
	// No client-side limit by default: API Priority and Fairness (GA since
	// Kubernetes 1.29) queues and sheds load on the server, fairly between
	// clients, which a client-side token bucket cannot see; SIG API
	// Machinery advises relying on it, and controller-runtime turned its
	// client-side limiter off by default for that reason
	// (kubernetes-sigs/controller-runtime#3119). A 2,000-Bar cold start
	// needs about 6,000 writes; any fixed QPS either throttles that or is
	// no limit at all. Set a positive value to cap the controller anyway.
	fs.Float64Var(&o.qps, "kube-api-qps", -1, "Sustained queries per second to the API server (client-side limit); negative: no client-side limit, the API server's priority and fairness applies.")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "Burst of queries above --kube-api-qps, when that is positive.")
	// Since Kubernetes 1.37 the API server gzips a WatchList stream for a
	// client that accepts gzip (the WatchListCompression feature, beta, on
	// by default), one gzip member per flush, which it does whenever no
	// more events wait: a compressor on the API server and new Huffman
	// tables in the controller every few events. Informers open such a
	// stream at start and after a relist, and it lasts until its timeout
	// (5-10 minutes), so a cold start pays it for every Bar and Deployment
	// (3 % of the controller's CPU samples at 5,000 Bars;
	// docs/measurements/benchmarks-controller-cost-first-to-third-steps.md,
	// third steps); the plain watches after it are not compressed.
	fs.BoolVar(&o.noCompression, "disable-compression", true, "Do not ask the API server for gzip-compressed responses (since Kubernetes 1.37 it gzips the WatchList stream an informer opens at start and after a relist). false: accept gzip, for a controller far from its API server on a slow link.")
	fs.DurationVar(&o.resyncPeriod, "resync-period", 10*time.Minute, "How often every Bar is re-checked against the caches even without events; 0 disables. A re-check that finds nothing to do makes no API call.")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", ":8443", "Address of the Prometheus /metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve /metrics over HTTPS, only to callers whose bearer token the API server accepts (TokenReview) and who may get the non-resource URL /metrics (SubjectAccessReview). false: plain HTTP to anyone, for local runs.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint (a mounted kubernetes.io/tls Secret; renewed files are picked up). Empty: a self-signed certificate made at start.")
	fs.BoolVar(&o.profiling, "profiling", false, "Serve Go's runtime profiles (heap, goroutine, CPU, ...) under /debug/pprof/ on the metrics endpoint, behind the same authentication and authorization as /metrics.")
	fs.StringVar(&o.healthAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes; 0 disables them.")
	fs.StringVar(&o.loggingFormat, "logging-format", "text", "Log format: text (klog) or json (one object per line).")
	fs.StringVar(&o.trace, "trace", "", "Log every step (event, enqueue, dequeue, sync decisions, API calls, status) for the Bars whose namespace/name matches this pattern, e.g. default/example or 'default/*'. Empty: off.")
	// Peak memory against CPU. 20 gave the lowest peak in make bench-gc at 50,000 Bars: a
	// cold start's peak 446 MB against 529 at 50, for 18 % more CPU
	// (docs/benchmarks-large.md, the GC headroom part; internal/memory).
	fs.IntVar(&o.gcHeadroom, "gc-headroom-percent", 20, "How far the heap may grow past what the last garbage collection found live before the next, in percent of it (0-100, in steps of 10), but by at least 32 MiB or the live heap, whichever is less: above 32 MiB×100/percent live (160 MiB at 20) a cold start's heap peaks at about 1+percent/100 times the live heap, between 32 MiB and that at the live heap plus 32 MiB or a little more, below 32 MiB at twice the live heap. Lower costs more CPU; 100 is Go's own rule; 0 or $GOGC: Go's own GOGC setting.")
	le := &o.leaderElection
	fs.BoolVar(&le.Enabled, "leader-elect", false, "Run as one of several replicas: only the holder of a Lease syncs, the others stand by with warm caches.")
	fs.StringVar(&le.LeaseName, "leader-elect-lease-name", "bar-controller", "Name of the Lease used for leader election.")
	fs.StringVar(&le.Namespace, "leader-elect-lease-namespace", "", "Namespace of the Lease. Default: the Pod's namespace ($POD_NAMESPACE or the service account's), else default.")
	fs.DurationVar(&le.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long standbys wait after the last renewal before taking over a Lease whose holder went silent.")
	fs.DurationVar(&le.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew before it gives up leading (and exits).")
	fs.DurationVar(&le.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often to try to acquire or renew the Lease.")
	fs.IntVar(&o.shards, "shards", 1, "Split the Bars into this many shards, each synced by one replica at a time under a Lease of its own (<lease-name>-shard-<k>-of-<N>); the replicas share the shards out evenly. 1: one replica syncs every Bar. More than 1 needs --leader-elect; docs/sharding.md says when and how.")
	o.webhook.AddFlags(fs)
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
}

// validate refuses flag combinations that would do something unsafe, and
// values that cannot work.
func (o *options) validate() error {
	// Without --metrics-secure the endpoint answers anyone who reaches the
	// port; the profiles show memory contents (heap: what the caches
	// hold) and a CPU profile costs the process 30 s of sampling on
	// request.
	if o.profiling && !o.metricsSecure {
		return fmt.Errorf("--profiling requires --metrics-secure: without it anyone who reaches %s could read the process's memory profiles", o.metricsAddress)
	}
	// The tuner caps GOGC at Go's own 100: more headroom than that is
	// GOGC's business, and a negative one is a typo, not "off".
	if o.gcHeadroom < 0 || o.gcHeadroom > 100 {
		return fmt.Errorf("--gc-headroom-percent=%d: want 0 (off) to 100", o.gcHeadroom)
	}
	// Checked here, not first when a controller is built: sharded, that
	// is each time a shard is won, long after start.
	if o.trace != "" {
		if _, err := path.Match(o.trace, ""); err != nil {
			return fmt.Errorf("--trace=%q: %w", o.trace, err)
		}
	}
	if o.shards < 1 || o.shards > shards.Buckets {
		return fmt.Errorf("--shards=%d: want 1 to %d", o.shards, shards.Buckets)
	}
	// Shards are handed out through Leases: without them two replicas
	// would both sync every shard.
	if o.shards > 1 && !o.leaderElection.Enabled {
		return fmt.Errorf("--shards=%d requires --leader-elect: the shards are held through Leases", o.shards)
	}
	// The webhook's Secret and Service are in the controller's namespace,
	// unless its flags say otherwise.
	return o.webhook.Complete(leader.DefaultNamespace())
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
