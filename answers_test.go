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
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// TestPostDeploymentAsksForMetadataOnly: the create of a real client is
// the one the typed client would send (path, query, a protobuf body that
// decodes to the object), asks for the answer as metadata only, and
// returns the object sent with the answer's metadata; an error answer is
// the API server's Status, causes and message included: the sync reads a
// NamespaceTerminating cause and shows an Invalid's message.
func TestPostDeploymentAsksForMetadataOnly(t *testing.T) {
	bar := newBar("web", "web", 2)
	want, err := deploymentObject(withDesiredHash(desiredDeployment(bar)))
	if err != nil {
		t.Fatal(err)
	}
	answer := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace, UID: "d-uid", ResourceVersion: "42", Generation: 1,
			Labels: want.Labels, Annotations: want.Annotations, OwnerReferences: want.OwnerReferences},
	}
	var fail atomic.Pointer[apierrors.StatusError]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/apis/apps/v1/namespaces/default/deployments" ||
			r.URL.RawQuery != "fieldManager=bar-controller" {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		if ct := r.Header.Get("Content-Type"); ct != runtime.ContentTypeProtobuf {
			t.Errorf("Content-Type %q", ct)
		}
		sent := &appsv1.Deployment{}
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, sent); err != nil {
			t.Errorf("body: %v", err)
		} else if sent.TypeMeta = want.TypeMeta; !reflect.DeepEqual(sent, want) {
			t.Errorf("body decodes to\n%+v\nwant\n%+v", sent, want)
		}
		if accept := r.Header.Get("Accept"); !strings.HasPrefix(accept, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1") {
			t.Errorf("Accept %q", accept)
		}
		if err := fail.Load(); err != nil {
			// As the API server writes an error: a Status, in JSON.
			status := err.ErrStatus
			status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(int(status.Code))
			_ = json.NewEncoder(w).Encode(&status)
			return
		}
		writeMetadata(t, w, http.StatusCreated, answer)
	}))
	defer srv.Close()
	c := &Controller{kubeclientset: protobufClientset(t, srv.URL)}
	sent := want.DeepCopy()
	created, err := c.postDeployment(context.Background(), sent)
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion != "42" || created.UID != "d-uid" || created.Generation != 1 {
		t.Errorf("answer read as %s at resourceVersion %q, generation %d; want d-uid at 42, 1", created.UID, created.ResourceVersion, created.Generation)
	}
	if !reflect.DeepEqual(created.Spec, want.Spec) {
		t.Errorf("created spec %+v, want the spec sent", created.Spec)
	}
	terminating := apierrors.NewForbidden(appsv1.Resource("deployments"), want.Name, fmt.Errorf("namespace default is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace default is being terminated", Field: "metadata.namespace"}}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, want.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), -1, "must be non-negative")})
	for _, tc := range []struct {
		answer *apierrors.StatusError
		read   func(error) bool
	}{
		{apierrors.NewAlreadyExists(appsv1.Resource("deployments"), want.Name), apierrors.IsAlreadyExists},
		{terminating, func(err error) bool { return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) }},
		{invalid, func(err error) bool {
			return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "spec.replicas")
		}},
	} {
		fail.Store(tc.answer)
		if _, err := c.postDeployment(context.Background(), want.DeepCopy()); !tc.read(err) {
			t.Errorf("the answer %q read as %v", tc.answer.ErrStatus.Message, err)
		}
	}
}

// TestEventCreateAsksForMetadataOnly: an Event's create is the one
// EventSinkImpl would send, asks for the answer as metadata only, and
// returns the Event with the answer's metadata.
func TestEventCreateAsksForMetadataOnly(t *testing.T) {
	event := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "default"},
		Reason:     EventDeploymentCreated, Action: actionCreate, Note: "Created Deployment web", Type: "Normal",
		ReportingController: controllerAgentName, ReportingInstance: controllerAgentName + "-host",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/apis/events.k8s.io/v1/namespaces/default/events" || r.URL.RawQuery != "" {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		sent := &eventsv1.Event{}
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, sent); err != nil {
			t.Errorf("body: %v", err)
		} else if sent.Note != event.Note || sent.Name != event.Name {
			t.Errorf("body decodes to %+v", sent)
		}
		if accept := r.Header.Get("Accept"); !strings.HasPrefix(accept, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1") {
			t.Errorf("Accept %q", accept)
		}
		writeMetadata(t, w, http.StatusCreated, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: metav1.ObjectMeta{Name: event.Name, Namespace: event.Namespace, UID: "e-uid", ResourceVersion: "7"},
		})
	}))
	defer srv.Close()
	sink := &metadataEventSink{events.EventSinkImpl{Interface: protobufClientset(t, srv.URL).EventsV1()}}
	created, err := sink.Create(context.Background(), event)
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion != "7" || created.UID != "e-uid" || created.Note != event.Note {
		t.Errorf("created %+v", created)
	}
	if event.ResourceVersion != "" {
		t.Error("the Event passed in was changed")
	}
}

// writeMetadata answers as the API server answers a write asked for
// metadataOnly: the object's metadata, in protobuf.
func writeMetadata(t *testing.T, w http.ResponseWriter, code int, answer *metav1.PartialObjectMetadata) {
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
	w.WriteHeader(code)
	if err := protobuf.NewSerializer(nil, nil).Encode(answer, w); err != nil {
		t.Error(err)
	}
}

// protobufClientset is a real clientset for url that sends protobuf, as
// main.go configures the controller's.
func protobufClientset(t *testing.T, url string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: url, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// frontEnd is what may stand between the controller and the API server:
// it answers a write with the whole object (as the API server does when
// not asked for metadata only), and what it does with a request that asks
// for metadata only is refuse406 (406 Not Acceptable, in the body
// contentType406 says) or, if false, to ignore the asking and answer
// with the whole object all the same. It counts the requests by whether
// they asked.
type frontEnd struct {
	refuse406      bool
	contentType406 string
	whole          func(w http.ResponseWriter)
	asked, plain   atomic.Int32
}

func (f *frontEnd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		f.asked.Add(1)
		if f.refuse406 {
			w.Header().Set("Content-Type", f.contentType406)
			w.WriteHeader(http.StatusNotAcceptable)
			if f.contentType406 == "application/json" {
				_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
					Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
					Message: "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"})
			} else {
				_, _ = io.WriteString(w, "406 Not Acceptable\n")
			}
			return
		}
	} else {
		f.plain.Add(1)
	}
	f.whole(w)
}

// TestMetadataAnswerFallsBack: every write that asks for a metadata-only
// answer (the status apply, the Deployment create, the Event create)
// still reads the resourceVersion when a front end ignores the asking and
// answers with the whole object, and when it refuses the asking with 406,
// by sending the write again without it; after a 406 the writes no longer
// ask.
func TestMetadataAnswerFallsBack(t *testing.T) {
	bar := newBar("web", "web", 2)
	status := newStatus(bar, 2, readiness{metav1.ConditionTrue, barv1.ReasonDeploymentAvailable, readyMessage(2, 2, "web")}, fixedNow)
	wholeBar := func(w http.ResponseWriter) { // a custom resource: JSON only
		b := bar.DeepCopy()
		b.ResourceVersion, b.Status = "42", status
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b)
	}
	deployment, err := deploymentObject(withDesiredHash(desiredDeployment(bar)))
	if err != nil {
		t.Fatal(err)
	}
	wholeDeployment := func(w http.ResponseWriter) {
		d := deployment.DeepCopy()
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		d.UID, d.ResourceVersion, d.Generation = "d-uid", "42", 1
		d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways // and the rest the API server defaults
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		w.WriteHeader(http.StatusCreated)
		if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(d, w); err != nil {
			t.Error(err)
		}
	}
	event := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "default"}, Reason: EventDeploymentCreated,
		Action: actionCreate, Note: "Created Deployment web", Type: "Normal", ReportingController: controllerAgentName}
	wholeEvent := func(w http.ResponseWriter) {
		e := event.DeepCopy()
		e.TypeMeta = metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"}
		e.UID, e.ResourceVersion = "e-uid", "42"
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		w.WriteHeader(http.StatusCreated)
		if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(e, w); err != nil {
			t.Error(err)
		}
	}
	writes := []struct {
		name  string
		whole func(w http.ResponseWriter)
		write func(url string) (metav1.Object, error)
	}{
		{"status apply", wholeBar, func(url string) (metav1.Object, error) {
			cs, err := clientset.NewForConfig(&rest.Config{Host: url})
			if err != nil {
				t.Fatal(err)
			}
			return (&Controller{barclientset: cs}).applyStatus(context.Background(), bar, statusApplyConfiguration(bar, &status))
		}},
		{"Deployment create", wholeDeployment, func(url string) (metav1.Object, error) {
			return (&Controller{kubeclientset: protobufClientset(t, url)}).postDeployment(context.Background(), deployment.DeepCopy())
		}},
		{"Event create", wholeEvent, func(url string) (metav1.Object, error) {
			sink := &metadataEventSink{events.EventSinkImpl{Interface: protobufClientset(t, url).EventsV1()}}
			return sink.Create(context.Background(), event.DeepCopy())
		}},
	}
	for _, w := range writes {
		for _, fe := range []*frontEnd{
			{},
			{refuse406: true, contentType406: "application/json"},
			{refuse406: true, contentType406: "text/plain"},
		} {
			name := fmt.Sprintf("%s, front end refusing with 406 in %s", w.name, fe.contentType406)
			if !fe.refuse406 {
				name = w.name + ", front end ignoring as="
			}
			t.Run(name, func(t *testing.T) {
				metadataRefused.Store(false)
				t.Cleanup(func() { metadataRefused.Store(false) })
				fe.whole = w.whole
				srv := httptest.NewServer(fe)
				defer srv.Close()
				for range 2 {
					written, err := w.write(srv.URL)
					if err != nil {
						t.Fatalf("write failed: %v", err)
					}
					if written.GetResourceVersion() != "42" {
						t.Errorf("answer read at resourceVersion %q, want 42", written.GetResourceVersion())
					}
				}
				// Ignored: both writes asked, each once. Refused: the
				// first asked, then was sent again plain; the second no
				// longer asked.
				wantAsked, wantPlain := int32(2), int32(0)
				if fe.refuse406 {
					wantAsked, wantPlain = 1, 2
				}
				if fe.asked.Load() != wantAsked || fe.plain.Load() != wantPlain {
					t.Errorf("%d requests asked for metadata only, %d did not; want %d and %d", fe.asked.Load(), fe.plain.Load(), wantAsked, wantPlain)
				}
			})
		}
	}
}
