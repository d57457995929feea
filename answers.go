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

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
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

// metadataAnswer sends req, a write, asking for metadataOnly, and returns
// the metadata the API server answered with. An error answer is the
// Status the API server sent, with its reason, message and causes, as
// the typed client returns it: Result.Error decodes it, where
// Result.Raw's error is made from the status code alone (the sync reads
// a NamespaceTerminating cause and an Invalid's message).
func metadataAnswer(ctx context.Context, req *rest.Request) (metav1.ObjectMeta, error) {
	result := req.SetHeader("Accept", metadataOnly).Do(ctx)
	if err := result.Error(); err != nil {
		return metav1.ObjectMeta{}, err
	}
	raw, err := result.Raw()
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	obj, _, err := metadataCodecs.UniversalDeserializer().Decode(raw, nil, &metav1.PartialObjectMetadata{})
	if err != nil {
		return metav1.ObjectMeta{}, fmt.Errorf("reading the API server's answer: %w", err)
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return metav1.ObjectMeta{}, fmt.Errorf("the API server answered with a %T, not metadata", obj)
	}
	return m.ObjectMeta, nil
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
		meta, err = metadataAnswer(ctx, client.Post().Namespace(obj.Namespace).Resource("deployments").
			Param("fieldManager", fieldManager).Body(obj))
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
	meta, err := metadataAnswer(ctx, client.Post().Namespace(event.Namespace).Resource("events").Body(event))
	if err != nil {
		return nil, err
	}
	created := event.DeepCopy()
	created.ObjectMeta = meta
	return created, nil
}
