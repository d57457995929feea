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
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	"github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/scheme"
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
		// Both informers index by owner (oldDeployments reads both).
		{"whole", nil, false, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, deploymentsByBarUID: indexDeploymentByBarUID}},
		{"trimDeployment", trimDeployment, false, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, deploymentsByBarUID: indexDeploymentByBarUID}},
		// What an owned Deployment without the managed-by label costs
		// the metadata cache (every other Deployment costs it less: no
		// owner reference, no index entry).
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
					delete(d.Labels, managedByLabel) // or the selector would keep it out
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

// BenchmarkCachedBar is BenchmarkCachedDeployment for the Bar cache: a
// converged Bar as the API server sends it (JSON: custom resources have no
// protobuf), with the managedFields of its create and of this
// controller's status writes and a Ready condition, decoded by the
// clientset's codec, transformed, and stored with the index the
// controller adds.
func BenchmarkCachedBar(b *testing.B) {
	const n = 20000
	for _, tc := range []struct {
		name      string
		transform cache.TransformFunc
	}{
		{"whole", nil},
		{"trimBar", trimBar},
	} {
		b.Run(tc.name, func(b *testing.B) {
			encoded := make([][]byte, n)
			for i := range encoded {
				encoded[i] = serverBarJSON(b, i)
			}
			decoder := scheme.Codecs.UniversalDeserializer()
			for b.Loop() {
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
					cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, barsByDeploymentName: indexBarByDeploymentName})
				before := liveBytes()
				for _, raw := range encoded {
					obj, _, err := decoder.Decode(raw, nil, &barv1.Bar{})
					if err != nil {
						b.Fatal(err)
					}
					var t interface{} = obj
					if tc.transform != nil {
						if t, err = tc.transform(t); err != nil {
							b.Fatal(err)
						}
					}
					if err := store.Add(t); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(liveBytes()-before)/n, "B/Bar")
				runtime.KeepAlive(store)
			}
		})
	}
}

// serverBarJSON is the i-th Bar of a converged bench namespace as a watch
// sends it: created by a client, its status applied by this controller.
func serverBarJSON(b *testing.B, i int) []byte {
	name := fmt.Sprintf("bar-%05d", i)
	bar := newBar(name, name, 2)
	bar.Namespace = "bench-5000-1"
	bar.UID = types.UID(fmt.Sprintf("5d0c3f5e-8b1a-4c52-9a3e-%012d", i))
	bar.ResourceVersion = fmt.Sprint(200000 + i)
	bar.Generation = 1
	created := metav1.NewTime(time.Date(2026, 11, 26, 1, 2, 3, 0, time.UTC))
	bar.CreationTimestamp = created
	bar.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "barcontroller.dev/v1", Time: &created,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{".":{},"f:deployment":{".":{},"f:name":{}},"f:replicas":{},"f:template":{".":{},"f:image":{}}}}`)}},
		{Manager: fieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "barcontroller.dev/v1", Time: &created,
			FieldsType: "FieldsV1", Subresource: "status", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:availableReplicas":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{}}}`)}},
	}
	bar.Status = barv1.BarStatus{ObservedGeneration: 1, AvailableReplicas: 2, Conditions: []metav1.Condition{{
		Type: barv1.ConditionReady, Status: metav1.ConditionTrue, Reason: barv1.ReasonDeploymentAvailable,
		Message: fmt.Sprintf("2 of 2 replicas of Deployment %s are available", name), ObservedGeneration: 1, LastTransitionTime: created,
	}}}
	raw, err := json.Marshal(bar)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func liveBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
