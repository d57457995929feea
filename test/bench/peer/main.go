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

// Command peer is bar-controller's job written as a controller-runtime
// user would write it: the bench (test/bench) runs it against the same
// API server as bar-controller and compares the two. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// eventComponent is the reportingController of the Events the peer
// records.
const eventComponent = "bar-controller-peer"

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(barv1.AddToScheme(scheme))
}

func main() {
	var (
		metricsAddr  string
		probeAddr    string
		leaderElect  bool
		profiling    bool
		workers      int
		resyncPeriod time.Duration
	)
	// --kubeconfig is controller-runtime's own flag, registered on
	// flag.CommandLine when its config package loads; ctrl.GetConfigOrDie
	// reads it.
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address of the HTTPS metrics endpoint (and /debug/pprof/ with --profiling); 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Only the holder of a Lease reconciles; run several replicas for a standby.")
	// bar-controller's --workers default. Its syncs in flight adapt
	// between 4 and that number by default; controller-runtime has no such
	// limit, so the peer runs the ceiling, which is where bar-controller's
	// limit goes on a healthy API server.
	flag.IntVar(&workers, "workers", 32, "Bars reconciled in parallel (MaxConcurrentReconciles).")
	flag.DurationVar(&resyncPeriod, "resync-period", 0, "How often the cache replays every object to the controller; 0: controller-runtime's default (10 hours, jittered).")
	// The bench profiles the controller it runs (heap and CPU), and passes
	// --profiling as it does to bar-controller. The handlers sit behind the
	// metrics endpoint's authentication and authorization.
	flag.BoolVar(&profiling, "profiling", true, "Serve Go's profiles under /debug/pprof/ on the metrics endpoint.")
	// Production logging (JSON, info): the development default of the
	// kubebuilder scaffold logs at debug level, every Event included.
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	if err := run(ctrl.SetupSignalHandler(), metricsAddr, probeAddr, leaderElect, profiling, workers, resyncPeriod); err != nil {
		setupLog.Error(err, "Exiting")
		os.Exit(1)
	}
}

func run(ctx context.Context, metricsAddr, probeAddr string, leaderElect, profiling bool, workers int, resyncPeriod time.Duration) error {
	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: true,
		// Callers must present a token the API server accepts (TokenReview)
		// and be allowed to get the path (SubjectAccessReview).
		FilterProvider: filters.WithAuthenticationAndAuthorization,
	}
	if profiling {
		metricsOpts.ExtraHandlers = pprofHandlers()
	}
	var cacheOpts cache.Options
	if resyncPeriod > 0 {
		cacheOpts.SyncPeriod = &resyncPeriod
	}

	// GetConfigOrDie leaves controller-runtime's default of no
	// client-side rate limit (QPS -1): API Priority and Fairness on the
	// server does that job.
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "bar-controller-peer.barcontroller.dev",
		Cache:                  cacheOpts,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	r := &BarReconciler{
		Client: mgr.GetClient(),
		Scheme: mgr.GetScheme(),
		// events.k8s.io/v1, as bar-controller writes them
		// (GetEventRecorderFor is the deprecated core/v1 recorder).
		Recorder: mgr.GetEventRecorder(eventComponent),
	}
	if err := r.SetupWithManager(ctx, mgr, workers); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Ready once the caches hold every Bar and Deployment: before that the
	// controller cannot act, and the bench starts its clock at ready.
	if err := mgr.AddReadyzCheck("readyz", cachesSynced(mgr.GetCache(), &barv1.Bar{}, &appsv1.Deployment{})); err != nil {
		return err
	}

	setupLog.Info("Starting manager", "workers", workers)
	return mgr.Start(ctx)
}

// cachesSynced is a readiness check that passes once the informers of
// objs have synced. It does not wait: a probe answers at once.
func cachesSynced(c cache.Cache, objs ...client.Object) healthz.Checker {
	return func(req *http.Request) error {
		for _, obj := range objs {
			inf, err := c.GetInformer(req.Context(), obj, cache.BlockUntilSynced(false))
			if err != nil {
				return err
			}
			if !inf.HasSynced() {
				return errors.New("caches not synced")
			}
		}
		return nil
	}
}

// pprofHandlers are net/http/pprof's handlers, for the metrics server's
// mux: /debug/pprof/ serves the index and every named profile (heap,
// goroutine, allocs, ...; ?gc=1 for the live heap), the others need their
// own paths.
func pprofHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}
