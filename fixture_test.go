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
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

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

func newBar(name, deploymentName string, replicas int32) *barv1.Bar {
	return &barv1.Bar{
		TypeMeta: metav1.TypeMeta{APIVersion: barv1.SchemeGroupVersion.String(), Kind: "Bar"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID(name + "-uid"),
			Generation: 2, ResourceVersion: "10",
		},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: deploymentName}, Replicas: ptr.To(replicas), Template: barv1.BarPodTemplate{Image: "nginx:1.28.0"}},
	}
}

// appliedFieldsJSON is this controller's managedFields entry as a real API
// server (v1.37) records it after applying newDeployment, captured from
// one; %s is the Bar's UID.
const appliedFieldsJSON = `{"f:metadata":{"f:annotations":{"f:barcontroller.dev/desired-hash":{}},` +
	`"f:labels":{"f:app.kubernetes.io/managed-by":{},"f:barcontroller.dev/bar":{}},` +
	`"f:ownerReferences":{"k:{\"uid\":\"%s\"}":{}}},` +
	`"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:barcontroller.dev/bar":{}}},` +
	`"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`

// ownedDeployment is what the API server would hold after applying
// newDeployment(bar) and the Deployment controller settling it.
func ownedDeployment(bar *barv1.Bar) *appsv1.Deployment {
	want := desiredReplicas(bar)
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: bar.Spec.Deployment.Name, Namespace: bar.Namespace, UID: types.UID(bar.Spec.Deployment.Name + "-uid"),
			Generation: 1, ResourceVersion: "20",
			Labels: map[string]string{barLabel: bar.Name, managedByLabel: managedByValue, "team": "web"},
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1",
				desiredHashAnnotation: newDeployment(bar).Annotations[desiredHashAnnotation]},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(bar, barv1.SchemeGroupVersion.WithKind("Bar"))},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: fieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fmt.Sprintf(appliedFieldsJSON, bar.UID))},
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(want),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{barLabel: bar.Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{barLabel: bar.Name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: containerName, Image: desiredImage(bar), ImagePullPolicy: corev1.PullIfNotPresent,
				}}},
			},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
		},
	}
}

// Paths of fields newDeployment sets, in managedFields terms.
var (
	replicasPath = fieldpath.MakePathOrDie("spec", "replicas")
	imagePath    = fieldpath.MakePathOrDie("spec", "template", "spec", "containers", fieldpath.KeyByFields("name", containerName), "image")
)

// takenBy records in d's managedFields what the API server does when
// another client changes fields of ours with an update: the paths leave
// this controller's entry and go to manager's.
func takenBy(t testing.TB, d *appsv1.Deployment, manager string, paths ...fieldpath.Path) {
	t.Helper()
	taken := fieldpath.NewSet(paths...)
	for i, e := range d.ManagedFields {
		if !isOurWrite(e) {
			continue
		}
		ours := &fieldpath.Set{}
		if err := ours.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			t.Fatal(err)
		}
		raw, err := ours.Difference(taken).ToJSON()
		if err != nil {
			t.Fatal(err)
		}
		d.ManagedFields[i].FieldsV1 = &metav1.FieldsV1{Raw: raw}
	}
	if manager == "" { // removed: nobody owns it
		return
	}
	raw, err := taken.ToJSON()
	if err != nil {
		t.Fatal(err)
	}
	d.ManagedFields = append(d.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager,
		Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}})
}

// withStatus gives the Bar the status the controller would have written.
func withStatus(bar *barv1.Bar, available int32, status metav1.ConditionStatus, reason, message string) *barv1.Bar {
	bar.Status = barv1.BarStatus{
		ObservedGeneration: bar.Generation,
		AvailableReplicas:  available,
		Conditions: []metav1.Condition{{
			Type: barv1.ConditionReady, Status: status, Reason: reason, Message: message,
			ObservedGeneration: bar.Generation, LastTransitionTime: metav1.NewTime(fixedNow.Add(-time.Hour)),
		}},
	}
	return bar
}

func readyMessage(available, want int32, name string) string {
	return fmt.Sprintf("%d of %d replicas of Deployment %s are available", available, want, name)
}

// --- expected requests ---

// applyDeploymentAction is the forced apply that repairs a Deployment,
// carrying the resourceVersion and UID it was judged on as preconditions.
func applyDeploymentAction(bar *barv1.Bar, judged metav1.Object) core.Action {
	want := newDeployment(bar)
	if rv := judged.GetResourceVersion(); rv != "" {
		want.WithResourceVersion(rv).WithUID(judged.GetUID())
	}
	body, err := json.Marshal(want)
	if err != nil {
		panic(err)
	}
	return core.PatchActionImpl{
		ActionImpl: core.ActionImpl{Namespace: bar.Namespace, Verb: "patch",
			Resource: appsv1.SchemeGroupVersion.WithResource("deployments")},
		Name: bar.Spec.Deployment.Name, PatchType: types.ApplyPatchType, Patch: body,
		PatchOptions: metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)},
	}
}

// createDeploymentAction is the create of a Deployment the caches show
// nobody holds: newDeployment's content as an object.
func createDeploymentAction(bar *barv1.Bar) core.Action {
	d, err := deploymentObject(newDeployment(bar))
	if err != nil {
		panic(err)
	}
	return core.CreateActionImpl{
		ActionImpl: core.ActionImpl{Namespace: bar.Namespace, Verb: "create",
			Resource: appsv1.SchemeGroupVersion.WithResource("deployments")},
		Name: bar.Spec.Deployment.Name, Object: d,
		CreateOptions: metav1.CreateOptions{FieldManager: fieldManager},
	}
}

// applyStatusAction spells the status body out by hand rather than through
// statusApplyConfiguration, so a mistake there shows up here.
func applyStatusAction(bar *barv1.Bar, available int32, status metav1.ConditionStatus, reason, message string, transition metav1.Time) core.Action {
	body := map[string]interface{}{
		"apiVersion": "barcontroller.dev/v1", "kind": "Bar",
		"metadata": map[string]interface{}{"name": bar.Name, "namespace": bar.Namespace},
		"status": map[string]interface{}{
			"observedGeneration": bar.Generation, "availableReplicas": available,
			"conditions": []interface{}{map[string]interface{}{
				"type": "Ready", "status": string(status), "reason": reason, "message": message,
				"observedGeneration": bar.Generation, "lastTransitionTime": transition.UTC().Format(time.RFC3339),
			}},
		},
	}
	raw, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return core.PatchActionImpl{
		ActionImpl: core.ActionImpl{Namespace: bar.Namespace, Verb: "patch", Subresource: "status",
			Resource: barv1.SchemeGroupVersion.WithResource("bars")},
		Name: bar.Name, PatchType: types.ApplyPatchType, Patch: raw,
		PatchOptions: metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)},
	}
}

// deleteDeploymentAction deletes d as the cache showed it: its UID and
// resourceVersion are preconditions.
func deleteDeploymentAction(d *appsv1.Deployment) core.Action {
	return core.DeleteActionImpl{
		ActionImpl: core.ActionImpl{Namespace: d.Namespace, Verb: "delete",
			Resource: appsv1.SchemeGroupVersion.WithResource("deployments")},
		Name:          d.Name,
		DeleteOptions: metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &d.UID, ResourceVersion: ptr.To(d.ResourceVersion)}},
	}
}

func keyOf(bar *barv1.Bar) cache.ObjectName { return cache.MetaObjectToName(bar) }
