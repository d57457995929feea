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
	"encoding/json"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	"github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned/fake"
	informers "github.com/barcontroller/bar-controller/pkg/generated/informers/externalversions"
)

var fixedNow = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

type fixture struct {
	t testing.TB

	kubeclient *k8sfake.Clientset
	client     *fake.Clientset
	recorder   *events.FakeRecorder

	kubeInformers  kubeinformers.SharedInformerFactory
	metaInformers  metadatainformer.SharedInformerFactory
	deploymentMeta kubeinformers.GenericInformer
	barInformers   informers.SharedInformerFactory

	// Objects in the informer caches (and in the fake API's tracker).
	bars        []*barv1.Bar
	deployments []*appsv1.Deployment

	// Requests the sync is expected to make.
	kubeactions []core.Action
	actions     []core.Action
	events      []string
}

func newFixture(t testing.TB) *fixture {
	return &fixture{t: t}
}

func (f *fixture) newController(ctx context.Context) *Controller {
	f.t.Helper()
	var barObjs, kubeObjs, metaObjs []runtime.Object
	for _, b := range f.bars {
		barObjs = append(barObjs, b)
	}
	for _, d := range f.deployments {
		kubeObjs = append(kubeObjs, d)
		if !managed(d) {
			metaObjs = append(metaObjs, &metav1.PartialObjectMetadata{
				TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: d.ObjectMeta})
		}
	}
	f.client = fake.NewSimpleClientset(barObjs...)
	f.kubeclient = k8sfake.NewClientset(kubeObjs...)
	// The fake API keeps the resourceVersion a patch does not set; a real
	// one moves it on every change, which is how the controller tells an
	// apply that changed something from one that did not.
	f.kubeclient.PrependReactor("patch", "deployments", bumpResourceVersion(f.kubeclient.Tracker()))

	barInformers := informers.NewSharedInformerFactory(f.client, 0)
	kubeInformers := kubeinformers.NewSharedInformerFactory(f.kubeclient, 0)
	metaScheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(metaScheme); err != nil {
		f.t.Fatal(err)
	}
	metaClient := metadatafake.NewSimpleMetadataClient(metaScheme, metaObjs...)
	f.metaInformers = metadatainformer.NewSharedInformerFactory(metaClient, 0)
	// What the controller creates shows in the watch that selects it, as
	// on a real API server: the full one (it carries the managed-by label),
	// never the metadata one (fixture_rv_test.go).
	f.kubeclient.PrependReactor("create", "deployments", createWithResourceVersion(f.kubeclient.Tracker(), metaClient.Tracker()))
	f.deploymentMeta = f.metaInformers.ForResource(appsv1.SchemeGroupVersion.WithResource("deployments"))
	f.barInformers, f.kubeInformers = barInformers, kubeInformers
	c, err := NewController(ctx, f.kubeclient, f.client,
		kubeInformers.Apps().V1().Deployments(), f.deploymentMeta, barInformers.Barcontroller().V1().Bars())
	if err != nil {
		f.t.Fatal(err)
	}
	f.recorder = events.NewFakeRecorder(10)
	c.recorder = f.recorder
	c.now = func() metav1.Time { return fixedNow }

	for _, b := range f.bars {
		if err := barInformers.Barcontroller().V1().Bars().Informer().GetIndexer().Add(b); err != nil {
			f.t.Fatal(err)
		}
	}
	// As in main.go: the full cache holds the Deployments with the
	// managed-by label, the metadata cache every other, trimmed.
	for _, d := range f.deployments {
		if managed(d) {
			if err := kubeInformers.Apps().V1().Deployments().Informer().GetIndexer().Add(d); err != nil {
				f.t.Fatal(err)
			}
			continue
		}
		m, err := trimDeploymentMetadata(&metav1.PartialObjectMetadata{ObjectMeta: d.ObjectMeta})
		if err != nil {
			f.t.Fatal(err)
		}
		if err := f.deploymentMeta.Informer().GetIndexer().Add(m); err != nil {
			f.t.Fatal(err)
		}
	}
	return c
}

// startInformers runs the informers, for the tests that drive the whole
// loop, instead of filling their caches.
func (f *fixture) startInformers(ctx context.Context) {
	f.kubeInformers.Start(ctx.Done())
	f.metaInformers.Start(ctx.Done())
	f.barInformers.Start(ctx.Done())
}

func (f *fixture) shutdownInformers() {
	f.kubeInformers.Shutdown()
	f.metaInformers.Shutdown()
	f.barInformers.Shutdown()
}

// run syncs the Bar once and checks requests and events.
func (f *fixture) run(ctx context.Context, key cache.ObjectName) {
	f.t.Helper()
	c := f.newController(ctx)
	if err := c.syncHandler(ctx, key); err != nil {
		f.t.Fatalf("syncHandler(%v): %v", key, err)
	}
	checkActions(f.t, "kube", f.kubeactions, f.kubeclient.Actions())
	checkActions(f.t, "bar", f.actions, f.client.Actions())
	checkEvents(f.t, f.events, f.recorder.Events)
}

func checkActions(t testing.TB, client string, want, got []core.Action) {
	t.Helper()
	for i := 0; i < max(len(want), len(got)); i++ {
		switch {
		case i >= len(got):
			t.Errorf("%s client: missing request %d: %s", client, i, describe(want[i]))
		case i >= len(want):
			t.Errorf("%s client: unexpected request %d: %s", client, i, describe(got[i]))
		default:
			checkAction(t, client, want[i], got[i])
		}
	}
}

// checkAction compares verb, resource, subresource and namespace, and the
// request body: the apply patch (as JSON, so field order does not matter),
// its field manager and force flag, and delete preconditions.
func checkAction(t testing.TB, client string, want, got core.Action) {
	t.Helper()
	if !(want.Matches(got.GetVerb(), got.GetResource().Resource) && want.GetSubresource() == got.GetSubresource() &&
		want.GetNamespace() == got.GetNamespace()) {
		t.Errorf("%s client: want %s, got %s", client, describe(want), describe(got))
		return
	}
	switch w := want.(type) {
	case core.PatchActionImpl:
		g := got.(core.PatchActionImpl)
		if g.PatchType != types.ApplyPatchType {
			t.Errorf("%s client: %s is a %s patch, want server-side apply", client, describe(got), g.PatchType)
		}
		if !jsonEqual(t, w.Patch, g.Patch) {
			t.Errorf("%s client: %s\nwant body %s\n got body %s", client, describe(got), w.Patch, g.Patch)
		}
		if wo, go_ := w.PatchOptions, g.PatchOptions; wo.FieldManager != go_.FieldManager || !reflect.DeepEqual(wo.Force, go_.Force) {
			t.Errorf("%s client: %s: want fieldManager %q force %v, got %q %v", client, describe(got),
				wo.FieldManager, ptr.Deref(wo.Force, false), go_.FieldManager, ptr.Deref(go_.Force, false))
		}
	case core.CreateActionImpl:
		g := got.(core.CreateActionImpl)
		if !equality.Semantic.DeepEqual(w.Object, g.Object) {
			t.Errorf("%s client: %s\nwant object %+v\n got object %+v", client, describe(got), w.Object, g.Object)
		}
		if w.CreateOptions.FieldManager != g.CreateOptions.FieldManager {
			t.Errorf("%s client: %s: want fieldManager %q, got %q", client, describe(got), w.CreateOptions.FieldManager, g.CreateOptions.FieldManager)
		}
	case core.DeleteActionImpl:
		g := got.(core.DeleteActionImpl)
		if w.Name != g.Name || !reflect.DeepEqual(w.DeleteOptions.Preconditions, g.DeleteOptions.Preconditions) {
			t.Errorf("%s client: want delete of %s with %+v, got %s with %+v", client, w.Name,
				w.DeleteOptions.Preconditions, g.Name, g.DeleteOptions.Preconditions)
		}
	}
}

func describe(a core.Action) string {
	s := a.GetVerb() + " " + a.GetResource().Resource
	if a.GetSubresource() != "" {
		s += "/" + a.GetSubresource()
	}
	if n, ok := a.(interface{ GetName() string }); ok {
		s += " " + a.GetNamespace() + "/" + n.GetName()
	}
	return s
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	var x, y interface{}
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func checkEvents(t testing.TB, want []string, events chan string) {
	t.Helper()
	var got []string
	for len(events) > 0 {
		got = append(got, <-events)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("events:\nwant %q\n got %q", want, got)
	}
}

// --- objects ---
