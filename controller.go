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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/shards"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
	barscheme "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/scheme"
	barinformers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions/barcontroller/v1"
	listers "github.com/barcontroller/bar-controller/pkg/generated/listers/barcontroller/v1"
)

const (
	controllerAgentName = "bar-controller"
	// fieldManager names the controller in every object's managedFields;
	// server-side apply uses it to know which fields are ours.
	fieldManager = "bar-controller"
	// syncTimeout bounds one sync. A graceful shutdown lets the syncs in
	// progress finish instead of cutting their API calls in half (see
	// Run); this bounds how long that takes.
	syncTimeout = 30 * time.Second
	// staleRetryDelay is how long a sync that found a cache older than its
	// own last write waits before it looks again (see processNextWorkItem).
	staleRetryDelay = 50 * time.Millisecond
	// cacheWaitReport is how often waitForCaches says what it waits for.
	cacheWaitReport = 5 * time.Second
	// discoveryTimeout bounds waitForCaches' question to the API server: an
	// address that accepts connections and never answers would otherwise
	// hold it for the TLS handshake timeout or longer.
	discoveryTimeout = 5 * time.Second
	// outsideCachesRecheck is how often a sharded sync looks again at a
	// Deployment in its Bar's way that none of its caches holds (another
	// shard's Bar's): a create refused and a read, a minute apart.
	outsideCachesRecheck = time.Minute
)

// Event reasons. Events are written only when something changes.
const (
	EventDeploymentCreated  = "DeploymentCreated"
	EventDeploymentUpdated  = "DeploymentUpdated"
	EventDeploymentDeleted  = "DeploymentDeleted"
	EventDeploymentNotOwned = barv1.ReasonDeploymentNotOwned
	EventApplyFailed        = barv1.ReasonApplyFailed
)

// Event actions: what the controller did (events.k8s.io/v1 Event.action).
const (
	actionCreate = "Create"
	actionUpdate = "Update"
	actionDelete = "Delete"
	actionSync   = "Sync"
)

// The event recorder encodes the objects it reports on with client-go's
// scheme, which must therefore know Bars. Once, before any goroutine reads it.
func init() {
	utilruntime.Must(barscheme.AddToScheme(scheme.Scheme))
}

// Controller reconciles Bars into Deployments. An event travels through it
// in named steps: an informer handler (handlers.go) enqueues a Bar key;
// processNextWorkItem dequeues it; syncHandler (sync.go) computes and applies the
// Deployment; updateStatus reports the outcome on the Bar.
type Controller struct {
	kubeclientset kubernetes.Interface
	barclientset  clientset.Interface

	// Two disjoint views of Deployments (see main.go): the ones this
	// controller manages, whole, to compare with what a Bar wants; and the
	// metadata of every other, to know who holds a name.
	deploymentsLister     appslisters.DeploymentLister
	deploymentsIndexer    cache.Indexer
	deploymentsSynced     cache.InformerSynced
	deploymentMetaIndexer cache.Indexer
	deploymentMetaSynced  cache.InformerSynced
	barsLister            listers.BarLister
	barsIndexer           cache.Indexer
	barsSynced            cache.InformerSynced

	// queue holds the keys of Bars to sync. It never holds the same key
	// twice, never gives one key to two workers at once, and backs off
	// keys whose syncs keep failing.
	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// writes keeps a sync from acting on a cache older than its own writes.
	writes *writeTracker
	// trace logs every step for the Bars --trace names; nil traces nothing.
	trace *tracer
	// slots, if set, bound the syncs in flight below the number of
	// workers, and the Event writes with them (UseSlots).
	slots slots

	broadcaster events.EventBroadcaster
	eventSink   *limitedSink
	recorder    events.EventRecorder
	logger      klog.Logger
	now         func() metav1.Time

	// shard, when set, is the one shard of the Bars this controller
	// syncs (--shards, InShard).
	shard *shards.Shard
}

// queueName names the work queue in the workqueue_* metrics.
func (c *Controller) queueName() string {
	if c.shard != nil {
		return "bars-shard-" + c.shard.String()
	}
	return "bars"
}

// An Option changes how NewController builds the controller.
type Option func(*Controller)

// InShard makes a controller of one shard (internal/shards): its caches
// hold that shard's Bars and Deployments only, its work queue is named
// for it (bars-shard-<k>-of-<N> in the workqueue metrics), and the
// Deployments it writes carry their Bar's bucket label, by which the
// shard's Deployment cache selects them.
func InShard(s shards.Shard) Option {
	return func(c *Controller) { c.shard = &s }
}

// NewController wires the handlers and indexes into the informers. Call it
// before the informers start.
func NewController(
	ctx context.Context,
	kubeclientset kubernetes.Interface,
	barclientset clientset.Interface,
	deploymentInformer appsinformers.DeploymentInformer,
	deploymentMetaInformer kubeinformers.GenericInformer,
	barInformer informers.BarInformer,
	options ...Option) (*Controller, error) {
	logger := klog.FromContext(ctx)

	// Events go through the events.k8s.io API's recorder, as kube-scheduler's
	// do, not the older tools/record one: record writes every event from
	// one goroutine and drops what does not fit in a queue of 1,000
	// (maxQueuedEvents in tools/record/event.go), which a cold start of a
	// few thousand Bars overflows. tools/events writes each event on its own
	// goroutine (eventBroadcasterImpl.recordToSink in
	// tools/events/event_broadcaster.go), so the event, the third write per
	// Bar, keeps pace with the workers. Not without bound, though: under
	// API Priority and Fairness pushing back, hundreds of event writes in
	// flight would take the seats the workers' writes need (limitedSink).
	// Writing them starts in Run, with the context of the syncs' own
	// API calls (see recordEvents).
	eventSink := newLimitedSink(&metadataEventSink{events.EventSinkImpl{Interface: kubeclientset.EventsV1()}}, newFixedSlots(eventWriters))
	broadcaster := events.NewBroadcaster(eventSink)
	if err := logEvents(broadcaster, logger); err != nil {
		return nil, fmt.Errorf("logging events: %w", err)
	}

	c := &Controller{
		kubeclientset:         kubeclientset,
		barclientset:          barclientset,
		deploymentsLister:     deploymentInformer.Lister(),
		deploymentsIndexer:    deploymentInformer.Informer().GetIndexer(),
		deploymentsSynced:     deploymentInformer.Informer().HasSynced,
		deploymentMetaIndexer: deploymentMetaInformer.Informer().GetIndexer(),
		deploymentMetaSynced:  deploymentMetaInformer.Informer().HasSynced,
		barsLister:            barInformer.Lister(),
		barsIndexer:           barInformer.Informer().GetIndexer(),
		barsSynced:            barInformer.Informer().HasSynced,
		broadcaster:           broadcaster,
		eventSink:             eventSink,
		logger:                logger,
		now:                   metav1.Now,
	}
	for _, o := range options {
		o(c)
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: c.queueName()})
	c.recorder = c.newRecorder()
	c.writes = newWriteTracker(trackedStores(deploymentInformer.Informer().GetIndexer(), c.barsIndexer))

	if err := barInformer.Informer().AddIndexers(cache.Indexers{barsByDeploymentName: indexBarByDeploymentName}); err != nil {
		return nil, fmt.Errorf("adding Bar index: %w", err)
	}
	for _, informer := range []cache.SharedIndexInformer{deploymentInformer.Informer(), deploymentMetaInformer.Informer()} {
		if err := informer.AddIndexers(cache.Indexers{deploymentsByBarUID: indexDeploymentByBarUID}); err != nil {
			return nil, fmt.Errorf("adding Deployment index: %w", err)
		}
	}
	if _, err := barInformer.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    c.addBar,
		UpdateFunc: c.updateBar,
		DeleteFunc: c.deleteBar,
	}); err != nil {
		return nil, fmt.Errorf("adding Bar event handler: %w", err)
	}
	for _, informer := range []cache.SharedIndexInformer{deploymentInformer.Informer(), deploymentMetaInformer.Informer()} {
		if _, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    c.addDeployment,
			UpdateFunc: c.updateDeployment,
			DeleteFunc: c.deleteDeployment,
		}); err != nil {
			return nil, fmt.Errorf("adding Deployment event handler: %w", err)
		}
	}
	return c, nil
}

// HasSynced reports whether the informer caches have been filled; until
// then the controller would mistake "not cached yet" for "does not exist".
func (c *Controller) HasSynced() bool {
	return c.barsSynced() && c.deploymentsSynced() && c.deploymentMetaSynced()
}

// clients are the API clients every controller of the process shares.
type clients struct {
	kube kubernetes.Interface
	bars clientset.Interface
	meta metadata.Interface
}

// caches are one controller's informer factories.
type caches struct {
	kube kubeinformers.SharedInformerFactory
	meta metadatainformer.SharedInformerFactory
	bars barinformers.SharedInformerFactory
}

func (c caches) start(stop <-chan struct{}) {
	c.kube.Start(stop)
	c.meta.Start(stop)
	c.bars.Start(stop)
}

// shutdown waits, briefly, for the informers to stop (shutdownInformers).
func (c caches) shutdown(logger klog.Logger) {
	shutdownInformers(logger, informerShutdownTimeout, c.kube, c.meta, c.bars)
}

// deploymentSelectors are the label selectors of the whole and the
// metadata-only Deployment caches (newController).
func deploymentSelectors(shard *shards.Shard) (managed, others string) {
	if shard == nil {
		return managedSelector, othersSelector
	}
	return managedSelector + "," + shard.DeploymentRequirement(), othersSelector
}

// newController builds a controller and the informers it reads: of every
// Bar in the namespace (shard nil), or of one shard's (InShard).
//
// Deployments are watched twice, so that the cache holds only what the
// controller reads, and each Deployment once. Whole: the ones with the
// managed-by label newDeployment sets, to compare with what their Bars
// want. Metadata only (the API server sends nothing else): every other
// Deployment, so that one that stands in a Bar's way is seen, and never
// written to, and its removal wakes that Bar. Unrelated Deployments
// then cost their name, UID and controller reference
// (trimDeploymentMetadata), not a decoded Deployment; a Deployment
// moves from one cache to the other when its label is added or removed.
//
// A shard's whole cache holds the managed Deployments of its buckets
// (shards.BucketLabel) and ours with no bucket, from before --shards,
// until their first sync gives them one; its metadata cache every
// unmanaged Deployment, whatever its labels. The API server filters its
// Bars (shards.NewBarInformer).
func newController(ctx context.Context, opts options, cl clients, shard *shards.Shard) (*Controller, caches, error) {
	managed, others := deploymentSelectors(shard)
	c := caches{
		kube: kubeinformers.NewSharedInformerFactoryWithOptions(cl.kube, opts.resyncPeriod,
			kubeinformers.WithNamespace(opts.namespace), kubeinformers.WithTransform(trimDeployment),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managed })),
		meta: metadatainformer.NewFilteredSharedInformerFactory(cl.meta, 0, opts.namespace,
			func(o *metav1.ListOptions) { o.LabelSelector = others }),
		bars: barinformers.NewSharedInformerFactoryWithOptions(cl.bars, opts.resyncPeriod,
			barinformers.WithNamespace(opts.namespace), barinformers.WithTransform(trimBar)),
	}
	deploymentMeta := c.meta.ForResource(appsv1.SchemeGroupVersion.WithResource("deployments"))
	if err := deploymentMeta.Informer().SetTransform(trimDeploymentMetadata); err != nil {
		return nil, c, err
	}
	var options []Option
	if shard != nil {
		// Registered first, the shard's informer is the one the factory
		// hands out for Bars.
		c.bars.InformerFor(&barv1.Bar{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
			return shards.NewBarInformer(klog.FromContext(ctx), client, opts.namespace, resync, *shard)
		})
		options = append(options, InShard(*shard))
	}
	controller, err := NewController(ctx, cl.kube, cl.bars,
		c.kube.Apps().V1().Deployments(), deploymentMeta, c.bars.Barcontroller().V1().Bars(), options...)
	if err != nil {
		return nil, c, err
	}
	if err := controller.Trace(opts.trace); err != nil {
		// Run never starts, so nothing else shuts the queue down; a
		// shard's work that fails here is started again, and each failed
		// start would leave its queue's goroutines behind.
		controller.queue.ShutDown()
		return nil, c, err
	}
	return controller, c, nil
}
