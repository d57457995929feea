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
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// The controller's writes read one thing from the API server's answer: the
// object's new resourceVersion (writeTracker, freshness.go). The object
// itself comes back through the watch. So they ask for the answer as
// metadata only, as the metadata informer asks of its watch, and the API
// server neither encodes nor the controller decodes the rest.

// metadataOnly asks the API server to answer a write with the object's
// metadata alone, in protobuf if it can. A Bar, a custom resource,
// otherwise comes back whole and in JSON, and decoding it was the largest
// part of a status write's cost in the controller (5 % of its CPU in a
// cold start); a created Deployment comes back whole in protobuf, with
// every field the API server defaulted.
const metadataOnly = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// metadataCodecs decode what the API server answers to metadataOnly.
var metadataCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// metadataAnswer sends the write newRequest makes, asking for
// metadataOnly, and returns the metadata the API server answered with. An
// error answer is the Status the API server sent, with its reason, message
// and causes, as the typed client returns it: Result.Error decodes it,
// where Result.Raw's error is made from the status code alone (the sync
// reads a NamespaceTerminating cause and an Invalid's message).
//
// Not everything between the controller and the API server honours the
// asking. A front end (a proxy, an aggregation layer) that drops the
// media type's parameters answers with the whole object, which the
// client's own decoder reads; one that refuses them answers 406 Not
// Acceptable, and the write is sent again as the typed client sends it
// (newRequest's Accept, the client's own). Without these, the first
// failed to decode and the second was refused before anything was
// written, on every retry, forever: the Bar's status never written, no
// event. A 406 refuses before the write (the API server negotiates the
// answer's type first), so sending it again repeats nothing.
func metadataAnswer(ctx context.Context, newRequest func() (*rest.Request, error)) (metav1.ObjectMeta, error) {
	whole := func() (metav1.ObjectMeta, error) {
		req, err := newRequest()
		if err != nil {
			return metav1.ObjectMeta{}, err
		}
		return wholeAnswer(req.Do(ctx))
	}
	if metadataRefused.Load() {
		return whole()
	}
	req, err := newRequest()
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	result := req.SetHeader("Accept", metadataOnly).Do(ctx)
	if err := result.Error(); apierrors.IsNotAcceptable(err) {
		if !metadataRefused.Swap(true) {
			klog.FromContext(ctx).Info("The API server's front end refuses metadata-only answers; writes ask for whole objects from now on", "err", err)
		}
		return whole()
	} else if err != nil {
		return metav1.ObjectMeta{}, err
	}
	raw, err := result.Raw()
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	obj, _, err := metadataCodecs.UniversalDeserializer().Decode(raw, nil, &metav1.PartialObjectMetadata{})
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok && err == nil {
		return m.ObjectMeta, nil
	}
	// Not metadata: the whole object, perhaps, read as the typed client
	// reads it.
	m, wholeErr := wholeAnswer(result)
	if wholeErr != nil {
		return metav1.ObjectMeta{}, fmt.Errorf("reading the API server's answer: not metadata (%v), nor an object the client knows: %w", err, wholeErr)
	}
	return m, nil
}

// metadataRefused remembers a 406 to metadataOnly, so that a front end
// that refuses it costs one request more once, not on every write. The
// controller talks to one API server.
var metadataRefused atomic.Bool

// wholeAnswer reads the metadata of the whole object an answer carries,
// with the client's own decoder (the one for the answer's content type).
func wholeAnswer(result rest.Result) (metav1.ObjectMeta, error) {
	obj, err := result.Get()
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	accessor, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return metav1.ObjectMeta{}, fmt.Errorf("the API server answered with a %T, which has no metadata", obj)
	}
	m, ok := accessor.GetObjectMeta().(*metav1.ObjectMeta)
	if !ok {
		return metav1.ObjectMeta{}, fmt.Errorf("the API server answered with a %T, whose metadata is a %T", obj, accessor.GetObjectMeta())
	}
	return *m, nil
}

// postDeployment creates obj, as DeploymentInterface.Create with
// CreateOptions{FieldManager: fieldManager} does, and returns obj with the
// metadata the API server answered with: what the API server stored but
// for the fields it defaulted and the status, which it leaves empty on a
// create anyway. With a fake clientset (the unit tests), which has no REST
// client, it calls Create, and likewise passes on only the answer's
// metadata, so that a test fails if a caller starts to read more of the
// answer than a real one carries.
func (c *Controller) postDeployment(ctx context.Context, obj *appsv1.Deployment) (*appsv1.Deployment, error) {
	var meta metav1.ObjectMeta
	client, ok := c.kubeclientset.AppsV1().RESTClient().(*rest.RESTClient)
	if !ok || client == nil {
		created, err := c.kubeclientset.AppsV1().Deployments(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
		if err != nil {
			return nil, err
		}
		meta = created.ObjectMeta
	} else {
		// The query of metav1.CreateOptions{FieldManager: fieldManager},
		// written out rather than encoded by reflection; the body in the
		// client's content type (protobuf, main.go).
		var err error
		meta, err = metadataAnswer(ctx, func() (*rest.Request, error) {
			return client.Post().Namespace(obj.Namespace).Resource("deployments").
				Param("fieldManager", fieldManager).Body(obj), nil
		})
		if err != nil {
			return nil, err
		}
	}
	// obj is the caller's own (deploymentObject's copy), never cached.
	obj.ObjectMeta = meta
	obj.Status = appsv1.DeploymentStatus{}
	return obj, nil
}

// metadataEventSink is tools/events' sink, but its creates ask for the
// answer's metadata only, as the controller's other writes do: one Event
// per Bar is a third of a cold start's writes, and the broadcaster drops
// a create's answer (recordToSink), but for a series it refreshes, where
// it caches the answer: the Event it sent, with the answer's metadata
// here. Patches and updates (series) stay the library's.
type metadataEventSink struct {
	events.EventSinkImpl
}

func (s *metadataEventSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	client, ok := s.Interface.RESTClient().(*rest.RESTClient)
	if !ok || client == nil {
		return s.EventSinkImpl.Create(ctx, event)
	}
	if event.Namespace == "" {
		return nil, fmt.Errorf("can't create an event with empty namespace") // as EventSinkImpl
	}
	meta, err := metadataAnswer(ctx, func() (*rest.Request, error) {
		return client.Post().Namespace(event.Namespace).Resource("events").Body(event), nil
	})
	if err != nil {
		return nil, err
	}
	created := event.DeepCopy()
	created.ObjectMeta = meta
	return created, nil
}
