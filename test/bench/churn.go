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
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
)

// What an operator feels of a converged controller: how long after a
// Bar's spec changes its Deployment says so, and how long after that its
// status does; and how long a Deployment someone deleted stays missing.
// The bench changes R Bars a second for a while, each change a new image
// tag and a replica count, and times every change by its own watch.

// churn is one steady-state phase's measurements.
type churn struct {
	// Phase is "spec" (image and replicas of R Bars a second) or
	// "recreate" (R Deployments deleted a second).
	Phase   string
	Rate    int
	Changes int
	// Missed are changes whose Deployment (or status) the watch never
	// saw within churnGrace after the phase: a controller that drops
	// work shows here, not as a long tail.
	Missed int
	// MissedStatus are those of Missed whose Deployment was seen.
	MissedStatus int
	// ToDeployment is from the bench sending the change (the spec patch,
	// the delete) to its watch seeing the Deployment written as asked;
	// ToStatus from that to the Bar's status observing the change's
	// generation (spec phase only). They include the API server's write
	// and watch latencies, a few milliseconds, as a user's view would.
	ToDeployment, ToStatus distribution
	// QueueWait is the work queue's own wait over the phase (p99, from
	// the controller's workqueue_queue_duration_seconds buckets), and
	// MaxDepth the deepest queue sampled every churnSample.
	QueueWait time.Duration
	MaxDepth  float64
}

type distribution struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

func distributionOf(d []time.Duration) distribution {
	if len(d) == 0 {
		return distribution{}
	}
	slices.Sort(d)
	// The nearest rank: the smallest value with at least q of them at or
	// below it.
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.999999) - 1
		return d[max(0, min(i, len(d)-1))]
	}
	return distribution{N: len(d), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: d[len(d)-1]}
}

const (
	churnGrace  = 30 * time.Second
	churnSample = 250 * time.Millisecond
	churnImage  = "registry.example/bench:churn-%d"
)

// change is one change the bench made and what its watch saw of it.
type change struct {
	bar, deployment    string // keys
	gen                int64  // the Bar's generation the change makes
	oldUID             types.UID
	sent               time.Time
	deployed, observed time.Time
}

// churnWatch times changes by the bench's own informers on the namespace.
type churnWatch struct {
	bars, deployments cache.Indexer
	stop              context.CancelFunc

	mu       sync.Mutex
	byImage  map[string]*change // spec changes, by the image they ask for
	byBar    map[string]*change // spec changes waiting for status
	byDeploy map[string]*change // deletes waiting for the Deployment to come back
	seq      int                // the last image tag, unique over every phase
}

func newChurnWatch(ctx context.Context, w writers, ns string) (*churnWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	cw := &churnWatch{stop: cancel, byImage: map[string]*change{}, byBar: map[string]*change{}, byDeploy: map[string]*change{}}
	bf := informers.NewSharedInformerFactoryWithOptions(w.bars, 0, informers.WithNamespace(ns))
	kf := kubeinformers.NewSharedInformerFactoryWithOptions(w.kube, 0, kubeinformers.WithNamespace(ns))
	bi := bf.Barcontroller().V1().Bars().Informer()
	di := kf.Apps().V1().Deployments().Informer()
	if _, err := bi.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) { cw.barSeen(o.(*barv1.Bar)) }}); err != nil {
		cancel()
		return nil, err
	}
	seen := func(o any) { cw.deploymentSeen(o.(*appsv1.Deployment)) }
	if _, err := di.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		cancel()
		return nil, err
	}
	bf.Start(ctx.Done())
	kf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), bi.HasSynced, di.HasSynced) {
		cancel()
		return nil, fmt.Errorf("the churn watch's caches never synced")
	}
	cw.bars, cw.deployments = bi.GetIndexer(), di.GetIndexer()
	return cw, nil
}

func (cw *churnWatch) deploymentSeen(d *appsv1.Deployment) {
	now := time.Now()
	key := d.Namespace + "/" + d.Name
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if c := cw.byDeploy[key]; c != nil && d.UID != c.oldUID {
		c.deployed = now
		delete(cw.byDeploy, key)
	}
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return
	}
	if c := cw.byImage[d.Spec.Template.Spec.Containers[0].Image]; c != nil && c.deployed.IsZero() {
		c.deployed = now
		delete(cw.byImage, d.Spec.Template.Spec.Containers[0].Image)
	}
}

func (cw *churnWatch) barSeen(b *barv1.Bar) {
	now := time.Now()
	key := b.Namespace + "/" + b.Name
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if c := cw.byBar[key]; c != nil && b.Status.ObservedGeneration >= c.gen {
		c.observed = now
		delete(cw.byBar, key)
	}
}

// pending counts the changes still waiting for their watch.
func (cw *churnWatch) pending() int {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return len(cw.byImage) + len(cw.byBar) + len(cw.byDeploy)
}

// runChurn makes rate changes a second for d, on the Bars round-robin in
// a shuffled order (so that no Bar changes twice within n/rate seconds),
// then waits up to churnGrace for the watch to see every one; metricsURL
// and token are the controller's, for its queue's metrics.
func runChurn(ctx context.Context, w writers, cw *churnWatch, phase string, rate int, d time.Duration, metricsURL, token string) (churn, error) {
	r := churn{Phase: phase, Rate: rate}
	names := cw.bars.ListKeys()
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	before, err := scrapeQueue(metricsURL, token)
	if err != nil {
		return r, err
	}
	depth := sampleDepth(ctx, metricsURL, token)
	var (
		wg      sync.WaitGroup
		changes []*change
		errs    = make(chan error, 1)
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
		c, do := cw.prepare(w, phase, names[i%len(names)], i)
		if c == nil {
			continue
		}
		changes = append(changes, c)
		wg.Go(func() {
			if err := do(ctx); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	tick.Stop()
	wg.Wait()
	select {
	case err := <-errs:
		return r, err
	default:
	}
	deadline := time.Now().Add(churnGrace)
	for cw.pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	after, err := scrapeQueue(metricsURL, token)
	if err != nil {
		return r, err
	}
	r.MaxDepth = depth()
	r.QueueWait = after.minus(before).quantile(0.99)
	var toDeployment, toStatus []time.Duration
	cw.mu.Lock()
	for _, c := range changes {
		switch {
		case c.deployed.IsZero():
			r.Missed++
		case phase == "spec" && c.observed.IsZero():
			r.Missed++
			r.MissedStatus++
		default:
			toDeployment = append(toDeployment, c.deployed.Sub(c.sent))
			if phase == "spec" {
				toStatus = append(toStatus, c.observed.Sub(c.deployed))
			}
		}
	}
	cw.mu.Unlock()
	r.Changes = len(changes)
	r.ToDeployment, r.ToStatus = distributionOf(toDeployment), distributionOf(toStatus)
	return r, nil
}

// prepare records change i of the phase on the Bar key, before it is
// sent (its watch event may come before the answer), and returns it with
// the request that makes it; nil if the Bar or its Deployment is gone.
func (cw *churnWatch) prepare(w writers, phase, key string, i int) (*change, func(context.Context) error) {
	obj, ok, _ := cw.bars.GetByKey(key)
	if !ok {
		return nil, nil
	}
	bar := obj.(*barv1.Bar)
	depKey := bar.Namespace + "/" + bar.Spec.Deployment.Name
	c := &change{bar: key, deployment: depKey, gen: bar.Generation + 1}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if phase == "recreate" {
		dep, ok, _ := cw.deployments.GetByKey(depKey)
		if !ok {
			return nil, nil
		}
		c.oldUID = dep.(*appsv1.Deployment).UID
		cw.byDeploy[depKey] = c
		c.sent = time.Now()
		return c, func(ctx context.Context) error {
			return w.kube.AppsV1().Deployments(bar.Namespace).Delete(ctx, bar.Spec.Deployment.Name, metav1.DeleteOptions{})
		}
	}
	cw.seq++
	image := fmt.Sprintf(churnImage, cw.seq)
	cw.byImage[image] = c
	cw.byBar[key] = c
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d,"template":{"image":%q}}}`, 1+i%2, image)
	c.sent = time.Now()
	return c, func(ctx context.Context) error {
		_, err := w.bars.BarcontrollerV1().Bars(bar.Namespace).Patch(ctx, bar.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
}
