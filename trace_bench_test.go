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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// BenchmarkEventToNoOpSync measures the path every event and resync of a
// converged Bar takes: the handler, the enqueue, the dequeue and a sync that
// finds nothing to do (no API call). It runs with --trace off, with a
// pattern that matches other Bars only, and for comparison with the Bar
// traced into a discarded log; the first two must cost the same:
//
//	go test -run '^$' -bench EventToNoOpSync -count 10 . | benchstat -
func BenchmarkEventToNoOpSync(b *testing.B) {
	for _, bc := range []struct{ name, pattern string }{
		{"trace=off", ""},
		{"trace=other", "other/*"},
		{"trace=this", "default/web"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := klog.NewContext(context.Background(), klog.LoggerWithName(klog.Background(), "bench").V(10))
			f := newFixture(b)
			bar := withStatus(newBar("web", "web", 2), 2, metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web"))
			f.bars = append(f.bars, bar)
			f.deployments = append(f.deployments, ownedDeployment(bar))
			c := f.newController(ctx)
			if err := c.Trace(bc.pattern); err != nil {
				b.Fatal(err)
			}
			if c.trace != nil {
				c.trace.logger = klog.Logger{}.WithName("discard") // traced, but to nowhere
			}
			b.ReportAllocs()
			for b.Loop() {
				c.updateBar(bar, bar)
				if !c.processNextWorkItem(ctx, ctx) {
					b.Fatal("queue shut down")
				}
			}
			if n := len(f.kubeclient.Actions()) + len(f.client.Actions()); n != 0 {
				b.Fatalf("a no-op sync made %d API requests", n)
			}
		})
	}
}
