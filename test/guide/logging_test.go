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

package guide

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestInformerLogsThroughItsContextLogger proves: an informer logs
// through the logger of the context it runs with (`RunWithContext`, a
// factory's `StartWithContext`), with that logger's names and values; one
// started from a stop channel (`Start`, `wait.ContextForChannel`) has a
// context without a logger, and logs through klog's global one instead.
func TestInformerLogsThroughItsContextLogger(t *testing.T) {
	t.Parallel()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.LoggerWithValues(logger, "owner", "guide")))
	defer cancel()

	run := func(ctx context.Context) {
		inf := cache.NewSharedIndexInformer(newFakeServer("a").lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
	}
	run(ctx)
	run(wait.ContextForChannel(ctx.Done()))

	var populated []string
	for _, line := range strings.Split(buffer.String(), "\n") {
		if strings.Contains(line, "Caches populated") {
			populated = append(populated, line)
		}
	}
	if len(populated) != 1 || !strings.Contains(populated[0], `owner="guide"`) {
		t.Errorf("the test logger got %d \"Caches populated\" lines, want one, with owner=\"guide\": %q", len(populated), populated)
	}
}
