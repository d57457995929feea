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

package shards

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/barcontroller/bar-controller/internal/metrics"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// NewBarInformer is an informer of the shard's Bars, for the generated
// factory's InformerFor. Its list and watch carry BarSelector, so that an
// API server with ShardedListAndWatch sends only the shard's Bars, in the
// initial events of the WatchList and in the watch that follows; and
// every Bar that arrives is tested again on the client (Matches), so that
// one without the gate, which ignores the selector and sends every Bar,
// leaves the cache as it would be. The first Bar the client drops is
// logged, once a process, and sets bar_controller_shard_selector_ignored.
func NewBarInformer(logger klog.Logger, client clientset.Interface, namespace string, resync time.Duration, s Shard) cache.SharedIndexInformer {
	f := &filter{shard: s, logger: logger}
	bars := func() barsClient { return client.BarcontrollerV1().Bars(namespace) }
	return cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.ShardSelector = s.BarSelector()
				list, err := bars().List(ctx, opts)
				if err != nil {
					return nil, err
				}
				kept := list.Items[:0]
				for i := range list.Items {
					if f.keep(&list.Items[i]) {
						kept = append(kept, list.Items[i])
					}
				}
				list.Items = kept
				return list, nil
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.ShardSelector = s.BarSelector()
				w, err := bars().Watch(ctx, opts)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
					bar, ok := e.Object.(*barv1.Bar)
					if !ok || e.Type == watch.Bookmark {
						return e, true // bookmarks and errors pass
					}
					return e, f.keep(bar)
				}), nil
			},
		}, client),
		&barv1.Bar{},
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}},
	)
}

type barsClient interface {
	List(context.Context, metav1.ListOptions) (*barv1.BarList, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// filter is the client's half of the shard selector.
type filter struct {
	shard  Shard
	logger klog.Logger
}

// ignored is said once a process: every shard's filter sees the same
// API server.
var ignored sync.Once

func (f *filter) keep(bar *barv1.Bar) bool {
	kept := f.shard.Holds(bar.UID)
	metrics.RecordShardWatchEvent(f.shard.String(), kept)
	if !kept {
		ignored.Do(func() {
			f.logger.Info("The API server ignores the shard selector (its ShardedListAndWatch feature gate is off): this replica receives every Bar and keeps its shard's only",
				"shard", f.shard, "bar", klog.KObj(bar))
		})
	}
	return kept
}
