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
	"fmt"
	"runtime"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkCachedDeployment measures what one managed Deployment costs the
// caches, in bytes of live heap: decoded from protobuf as the informer
// does, transformed, and stored with the indexes main.go sets up. The
// heap profile of make bench samples every 512 KB; this counts exactly,
// so a change to a transform shows here in bytes. Run with -benchtime=1x:
// the number is the metric, not the time.
func BenchmarkCachedDeployment(b *testing.B) {
	const n = 20000
	for _, tc := range []struct {
		name      string
		transform cache.TransformFunc
		metadata  bool
		indexers  cache.Indexers
	}{
		{"whole", nil, false, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}},
		{"trimDeployment", trimDeployment, false, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}},
		{"trimDeploymentMetadata", trimDeploymentMetadata, true,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, deploymentsByBarUID: indexDeploymentByBarUID}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			encoded := make([][]byte, n)
			for i := range encoded {
				bar := newBar(fmt.Sprintf("bar-%05d", i), fmt.Sprintf("bar-%05d", i), 2)
				bar.UID = types.UID(fmt.Sprintf("5d0c3f5e-8b1a-4c52-9a3e-%012d", i))
				d := serverDeployment(bar)
				// One container, as newDeployment makes it.
				d.Spec.Template.Spec.Containers = d.Spec.Template.Spec.Containers[:1]
				d.ResourceVersion = fmt.Sprint(100000 + i)
				var err error
				if tc.metadata {
					encoded[i], err = (&metav1.PartialObjectMetadata{TypeMeta: d.TypeMeta, ObjectMeta: d.ObjectMeta}).Marshal()
				} else {
					encoded[i], err = d.Marshal()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, tc.indexers)
				before := liveBytes()
				for _, raw := range encoded {
					var obj interface{}
					if tc.metadata {
						m := &metav1.PartialObjectMetadata{}
						if err := m.Unmarshal(raw); err != nil {
							b.Fatal(err)
						}
						obj = m
					} else {
						d := &appsv1.Deployment{}
						if err := d.Unmarshal(raw); err != nil {
							b.Fatal(err)
						}
						obj = d
					}
					if tc.transform != nil {
						var err error
						if obj, err = tc.transform(obj); err != nil {
							b.Fatal(err)
						}
					}
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(liveBytes()-before)/n, "B/Deployment")
				runtime.KeepAlive(store)
			}
		})
	}
}

func liveBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
