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
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/barcontroller/bar-controller/internal/intern"
	"github.com/barcontroller/bar-controller/internal/shards"
	"github.com/barcontroller/bar-controller/pkg/apis/barcontroller"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
)

// This file holds the informers' transforms: what the caches keep of each
// object. A transform runs once per object, before the cache or any
// handler sees it, and must be idempotent (WatchList applies it twice;
// docs/informer-internals.md). Whatever the controller does not read is
// memory it holds for every object it watches, for as long as it runs.

// interned holds the strings the transforms share across objects
// (internal/intern says which and why). Its seed is what the controller
// itself writes into every object it watches, shared whatever the
// cluster's users write: the managed-by label's value among them, since a
// label value goes in only if it is there already. The rest, which users
// write (images, namespaces, label keys, other writers' reasons), shares
// 4,096 places, and the table starts again when they are full, so that
// no supply of distinct strings, a tenant's, stops the sharing for others.
var interned = intern.NewTable(4096,
	managedByLabel, managedByValue, barLabel, desiredHashAnnotation, fieldManager, containerName,
	"apps/v1", "Deployment", barv1.SchemeGroupVersion.String(), "Bar", barv1.DefaultImage,
	"FieldsV1", string(metav1.ManagedFieldsOperationApply), string(metav1.ManagedFieldsOperationUpdate),
	barv1.ConditionReady, string(metav1.ConditionTrue), string(metav1.ConditionFalse), string(metav1.ConditionUnknown),
	barv1.ReasonDeploymentAvailable, barv1.ReasonScaledToZero, barv1.ReasonReplicasUnavailable,
	barv1.ReasonProgressDeadlineExceeded, barv1.ReasonRenaming, barv1.ReasonDeploymentNotOwned, barv1.ReasonApplyFailed,
	string(appsv1.DeploymentProgressing))

// trimBar is the Bar informer's transform. It keeps of the metadata the
// identity and the deletion mark, and of the status conditions the Ready
// one: all the controller reads (newStatus and statusChanged judge Ready
// alone, and the status apply names only Ready). Everything else is for
// the Bar's author, and the author sets its size: labels, finalizers and
// owner references by the thousand fit the API server's 1.5 MiB, and
// every replica would hold them for as long as the Bar lives (issue 39,
// fourteenth review: 1.56 MiB of heap a Bar). managedFields and
// annotations go too (a third of a Bar made by kubectl apply is its
// last-applied configuration). The strings every Bar repeats are shared
// (interned.ObjectMeta).
func trimBar(obj interface{}) (interface{}, error) {
	bar, ok := obj.(*barv1.Bar)
	if !ok {
		return obj, nil
	}
	bar.ManagedFields = nil
	bar.Annotations = nil
	bar.Labels = nil
	bar.Finalizers = nil
	bar.OwnerReferences = nil
	bar.APIVersion, bar.Kind = interned.String(bar.APIVersion), interned.String(bar.Kind)
	interned.ObjectMeta(&bar.ObjectMeta)
	if bar.Spec.Deployment.Name == bar.Name {
		bar.Spec.Deployment.Name = bar.Name
	}
	bar.Spec.Template.Image = interned.String(bar.Spec.Template.Image)
	var ready []metav1.Condition
	if c := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady); c != nil {
		ready = []metav1.Condition{*c}
		r := &ready[0]
		r.Type, r.Status, r.Reason = interned.String(r.Type), metav1.ConditionStatus(interned.String(string(r.Status))), interned.String(r.Reason)
	}
	bar.Status.Conditions = ready
	return bar, nil
}

// The managed-by label selects the full Deployment cache, and anyone who
// may create a Deployment may set it: what trimDeployment keeps must not
// grow with what others write, whether or not a Bar controls the
// Deployment (issue 39, fourteenth review: Deployments of 3,500 labels
// each took a replica to its memory limit at about 450 of them). So it
// keeps only the keys deploymentDiff and deploymentDrift ask about, and
// where a field can only be told apart by its whole value (the selector,
// a container's resources), a stand-in of bounded size that compares as
// unequal as the whole did.
const (
	// maxKeptResources bounds the requests and the limits kept of the
	// controller's container: twice what a Bar can ask for
	// (barcontroller.MaxResources), so that every list a Bar's apply can
	// leave is kept whole, and a longer one, which cannot equal any
	// Bar's, is kept as a longer one.
	maxKeptResources = 2 * barcontroller.MaxResources
	// maxOwnedFieldsBytes bounds one managedFields entry of the
	// controller's, before and after pruning: the most a Bar's apply can
	// own (2 x MaxResources names of barcontroller.MaxResourceNameBytes,
	// about 22 KiB) with room to spare. The API server keeps at most two
	// entries under one manager (its Apply and one Update), so a forged
	// pair costs at most 64 KiB and, over the bound, is not read at all
	// (sixteenth review: two of 63 KiB each made a cached copy of 128 KiB
	// and, parsed as they then were, cost every watch event 5 ms). A longer entry under the controller's manager name
	// was not written by it (any client may name itself bar-controller)
	// and is dropped: the fields it claimed then count as not the
	// controller's, which at worst costs an apply that replaces it.
	maxOwnedFieldsBytes = 32 << 10
	// maxUnprunedApplyBytes is the longest Apply entry kept unpruned:
	// newDeployment's is about 700 bytes with a few resources.
	maxUnprunedApplyBytes = 4 << 10
	// maxHashBytes bounds the desired-hash annotation kept: desiredHash's
	// is 20 hex digits.
	maxHashBytes = 64
	// maxRefFieldBytes bounds each string of an owner reference kept:
	// a name Kubernetes validates (253), which the API server checks of
	// no owner reference's kind, API version or name (fifteenth review,
	// C1: 1 MiB kinds were kept, and interned).
	maxRefFieldBytes = 253
)

// tooLong stands in for a string longer than the caches keep: no valid
// name, kind, version, UID or image, so it equals none the controller
// compares it with.
const tooLong = "(too long)"

// boundedRef is ref with each string over maxRefFieldBytes replaced by
// tooLong.
func boundedRef(ref metav1.OwnerReference) metav1.OwnerReference {
	for _, f := range []*string{&ref.APIVersion, &ref.Kind, &ref.Name, (*string)(&ref.UID)} {
		if len(*f) > maxRefFieldBytes {
			*f = tooLong
		}
	}
	return ref
}

// boundedImage is image, or tooLong past the longest a Bar can name.
func boundedImage(image string) string {
	if len(image) > barcontroller.MaxImageBytes {
		return tooLong
	}
	return image
}

// trimDeployment is the transform of the informer of the Deployments this
// controller manages (label-selected, see newController): it keeps exactly
// what deploymentDrift, deploymentReadiness and the handlers read (of the
// labels, the ones wantDeployment sets), and drops the rest: annotations
// but the desired hash (kubectl's last-applied
// configuration among them), the managedFields of every manager but this
// controller's own writes (and of those, the fields drift does not ask
// about: pruneOwnedFields), the pod template's spec beyond its containers'
// names, images and resources (requests and limits), the strategy, the
// status conditions but a Progressing=False one, and every field the API
// server defaulted; and it shares the strings every Deployment repeats
// (internal/intern). What deploymentDrift compares must be kept here
// too; TestTrimDeployment checks that drift and readiness do not change.
func trimDeployment(obj interface{}) (interface{}, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	var containers []corev1.Container
	if c := findContainer(d.Spec.Template.Spec.Containers, containerName); c != nil {
		// The one container newDeployment writes; others' are theirs.
		containers = []corev1.Container{{Name: interned.String(c.Name), Image: interned.String(boundedImage(c.Image)), Resources: corev1.ResourceRequirements{
			Requests: firstResources(c.Resources.Requests, maxKeptResources), Limits: firstResources(c.Resources.Limits, maxKeptResources)}}}
	}
	var annotations map[string]string
	if h, ok := d.Annotations[desiredHashAnnotation]; ok && len(h) <= maxHashBytes {
		// Longer is no hash desiredHash makes: as good as none.
		annotations = map[string]string{desiredHashAnnotation: h}
	}
	var managedFields []metav1.ManagedFieldsEntry
	for _, e := range d.ManagedFields {
		if !isOurWrite(e) || e.FieldsV1 != nil && len(e.FieldsV1.Raw) > maxOwnedFieldsBytes {
			// Longer than any the controller writes, before pruning too:
			// not read (a parse of 1.4 MiB cost a watch event 20 ms and
			// 29 MB: fifteenth review, m1).
			continue
		}
		if e = pruneOwnedFields(e); e.FieldsV1 == nil || len(e.FieldsV1.Raw) <= maxOwnedFieldsBytes {
			managedFields = append(managedFields, interned.ManagedFields(e))
		}
	}
	selector := d.Spec.Selector
	if selector != nil && (len(selector.MatchExpressions) != 0 || len(selector.MatchLabels) != 1 || selector.MatchLabels[barLabel] == "") {
		// Not the shape newDeployment writes, so unequal to any it
		// wants (deploymentDiff): one requirement says so.
		selector = otherSelector
	}
	templateLabels := onlyKeys(d.Spec.Template.Labels, barLabel)
	if s := selector; s != nil && len(s.MatchExpressions) == 0 && maps.Equal(s.MatchLabels, templateLabels) {
		// The selector and the pod template carry the same labels (as
		// newDeployment writes them): one map for both, read-only like
		// everything in the cache.
		templateLabels = s.MatchLabels
	}
	status := d.Status
	status.Conditions = nil
	for _, c := range d.Status.Conditions {
		// deploymentReadiness reads one condition; the Deployment
		// controller keeps two, with timestamps and messages.
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse {
			status.Conditions = []appsv1.DeploymentCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}}
		}
	}
	t := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:              d.Name,
			Namespace:         d.Namespace,
			UID:               d.UID,
			ResourceVersion:   d.ResourceVersion,
			Generation:        d.Generation,
			DeletionTimestamp: d.DeletionTimestamp,
			Labels:            onlyKeys(d.Labels, managedByLabel, barLabel, shards.BucketLabel),
			Annotations:       annotations,
			ManagedFields:     managedFields,
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: d.Spec.Replicas,
			Selector: selector,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: templateLabels},
				Spec:       corev1.PodSpec{Containers: containers},
			},
		},
		Status: status,
	}
	if ref := metav1.GetControllerOfNoCopy(d); ref != nil {
		// The controller's reference is the one it reads and writes; the
		// API server allows one.
		t.OwnerReferences = []metav1.OwnerReference{boundedRef(*ref)}
	}
	interned.ObjectMeta(&t.ObjectMeta)
	owner := ""
	if ref := metav1.GetControllerOfNoCopy(t); ref != nil {
		owner = ref.Name
	}
	if s := t.Spec.Selector; s != nil {
		interned.Labels(s.MatchLabels, t.Name, owner)
	}
	interned.Labels(t.Spec.Template.Labels, t.Name, owner) // none left to do if the selector's
	for i := range t.Status.Conditions {
		c := &t.Status.Conditions[i]
		c.Type, c.Status, c.Reason = appsv1.DeploymentConditionType(interned.String(string(c.Type))), corev1.ConditionStatus(interned.String(string(c.Status))), interned.String(c.Reason)
	}
	return t, nil
}

// onlyKeys is the part of m under keys, nil if none: a new map, so that
// the interning that follows writes to nothing the decoder still holds.
func onlyKeys(m map[string]string, keys ...string) map[string]string {
	var kept map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if kept == nil {
				kept = make(map[string]string, len(keys))
			}
			kept[k] = v
		}
	}
	return kept
}

// firstResources is l, or, when l names more than n resources, its first
// n+1 by name: still more than any Bar's (so unequal to it, as l was), and
// the same n+1 however often it is applied (the transform runs twice under
// WatchList).
func firstResources(l corev1.ResourceList, n int) corev1.ResourceList {
	if len(l) <= n {
		return l
	}
	kept := make(corev1.ResourceList, n+1)
	for _, name := range slices.Sorted(maps.Keys(l))[:n+1] {
		kept[name] = l[name]
	}
	return kept
}

// otherSelector stands for every selector newDeployment never writes
// (one label, barLabel): shared, never written, and unequal to any it
// wants.
var otherSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
	{Key: barLabel, Operator: metav1.LabelSelectorOpExists},
}}

// trimDeploymentMetadata is the transform of the metadata-only Deployment
// informer, which sees every Deployment in the controller's scope that the
// full one does not: what its cache keeps of each. The controller asks it only whether a name is taken,
// by whom (notOwnedReadiness, oldDeployments) and whether that
// changed (handleDeployment), and whether the full cache should hold it
// (newestDeployment), so it keeps the identity, the controller reference,
// the deletion mark and the managed-by label, and drops other labels,
// annotations and the other owner references. In a cluster with thousands
// of Deployments that are none of the controller's business, this is all
// it holds of them.
func trimDeploymentMetadata(obj interface{}) (interface{}, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	t := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
	}}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		t.OwnerReferences = []metav1.OwnerReference{boundedRef(*ref)}
	}
	interned.ObjectMeta(&t.ObjectMeta) // before the shared map below: it writes to the labels
	if m.Labels[managedByLabel] == managedByValue {
		// Whether the full cache's watch selects it (newestDeployment):
		// one map shared by every such entry, never written.
		t.Labels = managedByLabels
	}
	return t, nil
}

// managedByLabels is the label set trimDeploymentMetadata keeps.
var managedByLabels = map[string]string{managedByLabel: managedByValue}
