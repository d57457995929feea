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
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

func TestTraceMatches(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		skip    []string
	}{
		{"default/web", []string{"default/web"}, []string{"default/web2", "other/web", "default/we"}},
		{"default/*", []string{"default/web", "default/x"}, []string{"other/web"}},
		{"*/web", []string{"default/web", "team-a/web"}, []string{"default/web-1"}},
		{"default/web-*", []string{"default/web-1", "default/web-"}, []string{"default/web", "default/api-1"}},
		{"*/*", []string{"default/web", "a/b"}, nil},
	}
	for _, tc := range tests {
		tr, err := newTracer(tc.pattern, klog.Background(), func() int { return 0 })
		if err != nil {
			t.Fatalf("newTracer(%q): %v", tc.pattern, err)
		}
		for _, k := range tc.match {
			if !tr.matches(key(k)) {
				t.Errorf("--trace=%s does not match %s", tc.pattern, k)
			}
		}
		for _, k := range tc.skip {
			if tr.matches(key(k)) {
				t.Errorf("--trace=%s matches %s", tc.pattern, k)
			}
		}
	}

	off, err := newTracer("", klog.Background(), nil)
	if err != nil || off != nil {
		t.Fatalf("newTracer(\"\") = %v, %v; want nil, nil (tracing off)", off, err)
	}
	if off.matches(key("default/web")) {
		t.Error("a nil tracer matches")
	}
	// With tracing off, every step must be a no-op, not a nil dereference.
	off.added(key("default/web"), off.adding(key("default/web")))
	off.dequeued(key("default/web"), 0)

	if _, err := newTracer("default/[", klog.Background(), nil); err == nil {
		t.Error("newTracer accepted a malformed pattern")
	}
}

func key(s string) cache.ObjectName {
	ns, name, _ := strings.Cut(s, "/")
	return cache.ObjectName{Namespace: ns, Name: name}
}

// TestTraceStages runs the whole loop on fake clients with --trace naming
// one of two Bars, and checks that the traced Bar's steps appear in order
// and the other Bar leaves no trace.
func TestTraceStages(t *testing.T) {
	var out syncBuffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&out)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()

	f := newFixture(t)
	c := f.newController(ctx)
	if err := c.Trace("default/web"); err != nil {
		t.Fatal(err)
	}
	// In the fake API only, not in the caches as the fixture would put
	// them: the informers' first list must find them.
	for _, bar := range []*barv1.Bar{newBar("web", "web", 1), newBar("other", "other", 1)} {
		if err := f.client.Tracker().Add(bar); err != nil {
			t.Fatal(err)
		}
	}
	f.startInformers(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, ctx, 2) }()
	defer func() {
		cancel()
		<-done
		f.shutdownInformers()
	}()

	// The first sync creates the Deployment and writes the status; the
	// Deployment's own add event then brings the Bar back for a sync that
	// finds nothing to do.
	want := []string{
		`"Event" logger="trace" bar="default/web" handler="addBar" object="default/web"`,
		`initialList=true`,
		`"Enqueued" logger="trace" bar="default/web" queueDepth=`,
		`"Dequeued" logger="trace" bar="default/web"`,
		`"Sync started" logger="trace" bar="default/web"`,
		`deploymentResourceVersion="none"`,
		`decision="no Deployment in the cache: create it"`,
		`"API call" logger="trace" bar="default/web" call="create deployments/web"`,
		`decision="status changed: write it" detail="ReplicasUnavailable"`,
		`"API call" logger="trace" bar="default/web" call="apply bars/web/status"`,
		`"Sync done" logger="trace" bar="default/web"`,
		`decision="Deployment up to date: no write"`,
		`decision="status unchanged: no write"`,
		`"Sync done" logger="trace" bar="default/web"`,
	}
	// The Deployment the sync created comes back as an event that leads
	// to the Bar both ways: through its controller reference, and through
	// the index of Bars by deployment name. The status write's own event
	// can bring the Bar back first, for the sync that finds nothing to
	// do: so the wait is for both, not for that sync.
	vias := []string{"controllerRef", "nameIndex"}
	missing := func(log string) []string {
		var out []string
		for _, via := range vias {
			found := false
			for _, line := range strings.Split(log, "\n") {
				found = found || (strings.Contains(line, `handler="addDeployment" object="default/web" resourceVersion="1`) &&
					strings.HasSuffix(line, `via="`+via+`"`))
			}
			if !found {
				out = append(out, via)
			}
		}
		return out
	}
	var log string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		log = out.String()
		return inOrder(log, want) == len(want) && len(missing(log)) == 0, nil
	})
	if n := inOrder(log, want); n < len(want) {
		t.Fatalf("trace lacks, in order, %q (after %d of %d steps); trace:\n%s", want[n], n, len(want), log)
	}
	if m := missing(log); err != nil || len(m) > 0 {
		t.Fatalf("no trace of the Deployment's add event via %v (%v); trace:\n%s", m, err, log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "default/other") && strings.Contains(line, `logger="trace"`) {
			t.Errorf("a Bar the pattern does not match was traced: %s", line)
		}
	}
}

// inOrder returns how many of want appear in log one after the other.
func inOrder(log string, want []string) int {
	for i, w := range want {
		j := strings.Index(log, w)
		if j < 0 {
			return i
		}
		log = log[j+len(w):]
	}
	return len(want)
}

// syncBuffer is a bytes.Buffer that the controller's goroutines can log to
// while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
