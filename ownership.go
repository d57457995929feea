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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/barcontroller/bar-controller/internal/fieldset"
	"github.com/barcontroller/bar-controller/internal/shards"
)

// This file decides whether a Deployment has drifted from what its Bar
// asks for. Comparing values alone is not enough in a real cluster:
// mutating admission (a MutatingAdmissionPolicy that points images at a
// registry mirror, a webhook that pins digests or injects defaults)
// rewrites what the controller sends, so the stored Deployment differs
// from the request on every apply, and a controller that compares values
// re-applies on every resync, forever.
//
// Server-side apply records who set each field (managedFields). The API
// server computes that record from the request, before mutating admission
// runs (applyPatcher then admit, in k8s.io/apiserver's
// pkg/endpoints/handlers/patch.go), so a field that admission rewrote
// during our apply stays ours. A field another client changes with an
// update (kubectl set image, kubectl scale, kubectl edit) or a forced
// apply moves to that client's manager. So:
//
//   - a field whose value is what the Bar wants needs nothing, whoever
//     owns it;
//   - a field whose value differs and that the controller no longer owns
//     was changed or removed by someone else: drift, put it back;
//   - a field whose value differs and that the controller still owns holds
//     what its last apply produced, admission included: not drift;
//   - unless what the controller wants changed since that apply (the Bar
//     changed, or a new controller version wants something else). The
//     Deployment carries a hash of the last applied configuration for
//     that; when the hash differs, values decide alone.

// desiredHashAnnotation holds a hash of the apply configuration that last
// wrote the Deployment (without this annotation).
const desiredHashAnnotation = "barcontroller.dev/desired-hash"

// withDesiredHash stamps d with the hash of its own content.
func withDesiredHash(d *appsv1ac.DeploymentApplyConfiguration) *appsv1ac.DeploymentApplyConfiguration {
	return d.WithAnnotations(map[string]string{desiredHashAnnotation: desiredHash(d)})
}

// desiredHash is the hash withDesiredHash stamps d with: the one it
// carries, if stamped already.
func desiredHash(d *appsv1ac.DeploymentApplyConfiguration) string {
	if h, ok := d.Annotations[desiredHashAnnotation]; ok {
		return h
	}
	raw, err := json.Marshal(d)
	if err != nil {
		// An apply configuration is plain data; marshalling cannot fail.
		panic(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:10])
}

// desiredField is one field newDeployment sets: the name --trace and the
// DeploymentUpdated event use (deploymentDiff's names), and its path in
// managedFields.
type desiredField struct {
	name string
	path fieldpath.Path
}

// desiredFields lists the fields want sets, in deploymentDiff's order.
func desiredFields(want *appsv1ac.DeploymentApplyConfiguration) []desiredField {
	var fields []desiredField
	for _, k := range sortedKeys(want.Labels) {
		fields = append(fields, desiredField{"metadata.labels", fieldpath.MakePathOrDie("metadata", "labels", k)})
	}
	for _, ref := range want.OwnerReferences {
		// ownerReferences is a list keyed by uid.
		fields = append(fields, desiredField{"metadata.ownerReferences",
			fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", string(*ref.UID)))})
	}
	spec := want.Spec
	fields = append(fields,
		desiredField{"spec.replicas", fieldpath.MakePathOrDie("spec", "replicas")},
		desiredField{"spec.selector", fieldpath.MakePathOrDie("spec", "selector")})
	for _, k := range sortedKeys(spec.Template.Labels) {
		fields = append(fields, desiredField{"spec.template.metadata.labels",
			fieldpath.MakePathOrDie("spec", "template", "metadata", "labels", k)})
	}
	for _, c := range spec.Template.Spec.Containers {
		// containers is a list keyed by name.
		fields = append(fields, desiredField{"spec.template.spec.containers[" + *c.Name + "]",
			fieldpath.MakePathOrDie("spec", "template", "spec", "containers", fieldpath.KeyByFields("name", *c.Name), "image")})
		// One entry per quantity: resources is a granular map, and another
		// client can take a single limit from us (kubectl set resources).
		// Resources the Bar does not ask for are no field of ours, so
		// whoever set them keeps them.
		if r := c.Resources; r != nil {
			for _, part := range []struct {
				name string
				list *corev1.ResourceList
			}{{"requests", r.Requests}, {"limits", r.Limits}} {
				for _, q := range sortedResourceNames(ptrValue(part.list)) {
					fields = append(fields, desiredField{resourcesField(*c.Name),
						fieldpath.MakePathOrDie("spec", "template", "spec", "containers", fieldpath.KeyByFields("name", *c.Name), "resources", part.name, q)})
				}
			}
		}
	}
	return fields
}

// deploymentDrift lists the fields of want that need an apply; nil means
// none does. It reads have's managedFields entries of this controller and
// its desired-hash annotation, all of which trimDeployment keeps. want
// need not carry its hash (desiredDeployment): it is computed when a value
// differs, the only case that reads it.
func deploymentDrift(want *appsv1ac.DeploymentApplyConfiguration, have *appsv1.Deployment) []string {
	diff := deploymentDiff(want, have)
	if len(diff) == 0 {
		// Nothing differs, so nothing needs putting back, whoever owns
		// what. The common case, and free: no managedFields to parse.
		return nil
	}
	if have.Annotations[desiredHashAnnotation] != desiredHash(want) {
		// What we want changed since our last apply (or the Deployment
		// predates the hash): the values that differ need an apply.
		return diff
	}
	// We last applied exactly this. A value that differs is drift only if
	// someone else took the field; if it is still ours, admission set it
	// during our apply, and applying again would only make it do so again.
	owned := appliedFields(have)
	notOwned := map[string]bool{}
	for _, f := range desiredFields(want) {
		if owned == nil || !ownsField(owned, f.path) {
			notOwned[f.name] = true
		}
	}
	var drift []string
	for _, name := range diff {
		if notOwned[name] {
			drift = append(drift, name)
		}
	}
	return drift
}

// appliedFields returns the fields this controller owns in obj through
// its own writes of the object (the create that made it, the applies that
// repaired it), or nil if it owns none (or an entry is unreadable).
func appliedFields(obj metav1.Object) *fieldpath.Set {
	var owned *fieldpath.Set
	for _, e := range obj.GetManagedFields() {
		if !isOurWrite(e) || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return nil
		}
		if owned == nil {
			owned = set
		} else {
			owned = owned.Union(set)
		}
	}
	return owned
}

// isOurWrite tells this controller's entries of an object's managedFields
// from the others (including its status writes): the Apply entry of its
// server-side applies, and the Update entry of the create that made the
// Deployment (applyDeployment). The API server records both from the
// request as sent, before mutating admission (the create handler,
// k8s.io/apiserver's pkg/endpoints/handlers/create.go, updates managed
// fields before it admits), so in both a field admission rewrote stays
// ours.
func isOurWrite(e metav1.ManagedFieldsEntry) bool {
	return e.Manager == fieldManager && e.Subresource == "" &&
		(e.Operation == metav1.ManagedFieldsOperationApply || e.Operation == metav1.ManagedFieldsOperationUpdate)
}

// ownsField reports whether owned holds p, or anything under it: an atomic
// field (the selector) is owned as a whole, a granular one through its
// members.
func ownsField(owned *fieldpath.Set, p fieldpath.Path) bool {
	if owned.Has(p) {
		return true
	}
	s := owned
	for _, pe := range p {
		child, ok := s.Children.Get(pe)
		if !ok {
			return false
		}
		s = child
	}
	return !s.Empty()
}

// driftPrefixes are the parts of a Deployment whose ownership
// deploymentDrift asks about (desiredFields' paths all begin with one):
// the labels newDeployment sets, not every label, and its container, not
// every container, since an entry under the controller's manager name may
// be anyone's (maxOwnedFieldsBytes). nil stands for any key of a keyed
// list: the one ownerReference is keyed by the Bar's UID.
var driftPrefixes = [][]*fieldpath.PathElement{
	{named("metadata"), named("labels"), named(managedByLabel)},
	{named("metadata"), named("labels"), named(barLabel)},
	{named("metadata"), named("labels"), named(shards.BucketLabel)},
	{named("metadata"), named("ownerReferences"), nil},
	{named("spec"), named("replicas")},
	{named("spec"), named("selector")},
	{named("spec"), named("template"), named("metadata"), named("labels"), named(barLabel)},
	{named("spec"), named("template"), named("spec"), named("containers"), keyedByName(containerName), named("image")},
	{named("spec"), named("template"), named("spec"), named("containers"), keyedByName(containerName), named("resources")},
}

func named(name string) *fieldpath.PathElement { return &fieldpath.PathElement{FieldName: &name} }

func keyedByName(name string) *fieldpath.PathElement {
	return &fieldpath.PathElement{Key: fieldpath.KeyByFields("name", name)}
}

// pruneOwnedFields keeps of one of this controller's managedFields entries
// the fields deploymentDrift asks about. The create that made the
// Deployment owns every field the API server defaulted too (strategy,
// restart and DNS policy, termination message path...): 60 % of the
// entry, kept for every Deployment, never read. The pruning reads the
// entry once, copying what a prefix reaches as it is
// (internal/fieldset): an entry anyone may forge under the controller's
// name, up to maxOwnedFieldsBytes and new on every write, costs about
// what decoding its bytes does, where a parse into a fieldpath.Set cost
// 25 times an ordinary event, and a table of earlier results could be
// made to forget them (issue 39, sixteenth and seventeenth reviews). An
// entry that does not read is kept whole, so that appliedFields sees it
// fail as before. TestDriftPrefixesCoverDesiredFields keeps
// driftPrefixes and desiredFields in step.
func pruneOwnedFields(e metav1.ManagedFieldsEntry) metav1.ManagedFieldsEntry {
	if e.FieldsV1 == nil || e.Operation == metav1.ManagedFieldsOperationApply && len(e.FieldsV1.Raw) <= maxUnprunedApplyBytes {
		// An apply of newDeployment owns what it sent, which is what
		// drift asks about already; reading it costs more than the few
		// fields it would drop. A longer one is pruned like any.
		return e
	}
	raw, ok := fieldset.Prune(e.FieldsV1.Raw, driftKeys)
	if !ok {
		raw = e.FieldsV1.Raw
	}
	e.FieldsV1 = &metav1.FieldsV1{Raw: bytes.Clone(raw)} // not the decoder's buffer, nor spare capacity
	return e
}

// driftKeys are driftPrefixes as FieldsV1 writes their elements.
var driftKeys = func() [][]string {
	keys := make([][]string, len(driftPrefixes))
	for i, prefix := range driftPrefixes {
		for _, pe := range prefix {
			k := fieldset.Any
			if pe != nil {
				var err error
				if k, err = fieldpath.SerializePathElement(*pe); err != nil {
					panic(err) // the prefixes are constants
				}
			}
			keys[i] = append(keys[i], k)
		}
	}
	return keys
}()

func sortedResourceNames(l corev1.ResourceList) []string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	sort.Strings(names)
	return names
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
