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

package install

import (
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/randfill"

	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	barfuzzer "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/fuzzer"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
)

// TestRoundTrip is the test every Kubernetes API group runs: a random
// internal Bar, converted to each version, encoded to JSON, decoded and
// converted back, equals what it was; and each version survives its own
// JSON round trip.
func TestRoundTrip(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, barfuzzer.Funcs)

	scheme := runtime.NewScheme()
	Install(scheme)
	codecs := runtimeserializer.NewCodecFactory(scheme)
	roundtrip.RoundTripExternalTypesWithoutProtobuf(t, scheme, codecs, newFiller(t, codecs), nil)
}

// TestRoundTripToUnstructured: each version, encoded as JSON or CBOR and
// decoded as unstructured (the form the API server and a conversion webhook
// handle objects in), comes out the same either way and survives another
// round.
func TestRoundTripToUnstructured(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	// metav1.AddToGroupVersion registers the options kinds (CreateOptions,
	// ...) in every version; they have no internal version to fuzz from.
	nointernal := sets.New[schema.GroupVersionKind]()
	for gvk := range scheme.AllKnownTypes() {
		if gvk.Group == barcontroller.GroupName && gvk.Kind != "Bar" && gvk.Kind != "BarList" {
			nointernal.Insert(gvk)
		}
	}
	roundtrip.RoundtripToUnstructured(t, scheme, barfuzzer.Funcs, nil, nointernal)
}

// The two round trips a user can make against the API server, each through
// the other version: whatever one version says survives being read and
// written back through the other. Each version is serialized to JSON in
// between, as it would be on the wire.
const chainIterations = 2000

// TestRoundTripV1ThroughV1alpha1: v1 -> hub -> v1alpha1 (JSON) -> hub -> v1.
// This is a v1 Bar, with resources, read and written back by a v1alpha1
// client: the resources travel in ResourcesAnnotation, and so does the
// Bar's own value of that key where it has one (a Bar from before the
// admission policy): the fuzzer gives v1 Bars the key in every form.
func TestRoundTripV1ThroughV1alpha1(t *testing.T) {
	scheme, f := setup(t)
	for range chainIterations {
		original := &barv1.Bar{}
		f.Fill(original)
		original.TypeMeta = barv1.Bar{}.TypeMeta

		got := &barv1.Bar{}
		chain(t, scheme, original, &barv1alpha1.Bar{}, got)
		if !apiequality.Semantic.DeepEqual(original, got) {
			t.Fatalf("v1 -> v1alpha1 -> v1 changed the Bar (-original +got):\n%s", cmp.Diff(original, got))
		}
	}
}

// TestRoundTripV1alpha1ThroughV1: v1alpha1 -> hub -> v1 (JSON) -> hub ->
// v1alpha1, including every form of ResourcesAnnotation a client can write.
func TestRoundTripV1alpha1ThroughV1(t *testing.T) {
	scheme, f := setup(t)
	for range chainIterations {
		original := &barv1alpha1.Bar{}
		f.Fill(original)
		original.TypeMeta = barv1alpha1.Bar{}.TypeMeta

		got := &barv1alpha1.Bar{}
		chain(t, scheme, original, &barv1.Bar{}, got)
		if !apiequality.Semantic.DeepEqual(original, got) {
			t.Fatalf("v1alpha1 -> v1 -> v1alpha1 changed the Bar (-original +got):\n%s", cmp.Diff(original, got))
		}
	}
}

// chain converts in to the hub, to via (through JSON), to the hub and into
// out, and checks that no step changed the object it converted from.
func chain(t *testing.T, scheme *runtime.Scheme, in, via, out runtime.Object) {
	t.Helper()
	before := in.DeepCopyObject()
	hub := &barcontroller.Bar{}
	if err := scheme.Convert(in, hub, nil); err != nil {
		t.Fatalf("%T to the hub: %v", in, err)
	}
	if err := scheme.Convert(hub, via, nil); err != nil {
		t.Fatalf("hub to %T: %v", via, err)
	}
	hubBefore := hub.DeepCopy()
	wire, err := json.Marshal(via)
	if err != nil {
		t.Fatal(err)
	}
	decoded := via.DeepCopyObject()
	if err := json.Unmarshal(wire, decoded); err != nil {
		t.Fatal(err)
	}
	hub2 := &barcontroller.Bar{}
	if err := scheme.Convert(decoded, hub2, nil); err != nil {
		t.Fatalf("%T to the hub: %v", decoded, err)
	}
	if err := scheme.Convert(hub2, out, nil); err != nil {
		t.Fatalf("hub to %T: %v", out, err)
	}
	// Conversions share maps and slices between in and out; one that wrote
	// through them would corrupt the object it was given (an informer's
	// cache, say).
	if !apiequality.Semantic.DeepEqual(before, in) {
		t.Fatalf("converting %T changed it:\n%s", in, cmp.Diff(before, in))
	}
	if !apiequality.Semantic.DeepEqual(hubBefore, hub) {
		t.Fatalf("converting the hub to %T changed it:\n%s", via, cmp.Diff(hubBefore, hub))
	}
}

func setup(t *testing.T) (*runtime.Scheme, *randfill.Filler) {
	scheme := runtime.NewScheme()
	Install(scheme)
	return scheme, newFiller(t, runtimeserializer.NewCodecFactory(scheme))
}

// newFiller returns a randfill.Filler with the metadata and Bar fuzzer
// functions, seeded at random; the seed is logged so a failure can be
// replayed.
func newFiller(t *testing.T, codecs runtimeserializer.CodecFactory) *randfill.Filler {
	seed := rand.Int63()
	t.Logf("fuzzer seed %d", seed)
	return fuzzer.FuzzerFor(fuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, barfuzzer.Funcs), rand.NewSource(seed), codecs)
}
