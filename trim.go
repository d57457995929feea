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
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/barcontroller/bar-controller/internal/intern"
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

// trimBar is the Bar informer's transform. It drops managedFields (the
// controller never reads a Bar's, and they are often a third of an
// object's size) and annotations (nothing reads them either, and a Bar
// made by kubectl apply carries its whole last-applied configuration in
// one), and shares the strings every Bar repeats (interned.ObjectMeta). The
// labels stay: small, and what a reader of a Bar would look for first.
func trimBar(obj interface{}) (interface{}, error) {
	bar, ok := obj.(*barv1.Bar)
	if !ok {
		return obj, nil
	}
	bar.ManagedFields = nil
	bar.Annotations = nil
	bar.APIVersion, bar.Kind = interned.String(bar.APIVersion), interned.String(bar.Kind)
	interned.ObjectMeta(&bar.ObjectMeta)
	if bar.Spec.Deployment.Name == bar.Name {
		bar.Spec.Deployment.Name = bar.Name
	}
	bar.Spec.Template.Image = interned.String(bar.Spec.Template.Image)
	for i := range bar.Status.Conditions {
		c := &bar.Status.Conditions[i]
		c.Type, c.Status, c.Reason = interned.String(c.Type), metav1.ConditionStatus(interned.String(string(c.Status))), interned.String(c.Reason)
	}
	return bar, nil
}

// trimDeployment is the transform of the informer of the Deployments this
// controller manages (label-selected, see main.go): it keeps exactly what
// deploymentDrift, deploymentReadiness and the handlers read, and drops the
// rest: annotations but the desired hash (kubectl's last-applied
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
	containers := make([]corev1.Container, len(d.Spec.Template.Spec.Containers))
	for i, c := range d.Spec.Template.Spec.Containers {
		containers[i] = corev1.Container{Name: interned.String(c.Name), Image: interned.String(c.Image), Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests, Limits: c.Resources.Limits}}
	}
	var annotations map[string]string
	if h, ok := d.Annotations[desiredHashAnnotation]; ok {
		annotations = map[string]string{desiredHashAnnotation: h}
	}
	var managedFields []metav1.ManagedFieldsEntry
	for _, e := range d.ManagedFields {
		if isOurWrite(e) {
			managedFields = append(managedFields, interned.ManagedFields(pruneOwnedFields(e)))
		}
	}
	templateLabels := d.Spec.Template.Labels
	if s := d.Spec.Selector; s != nil && len(s.MatchExpressions) == 0 && maps.Equal(s.MatchLabels, templateLabels) {
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
			Labels:            d.Labels,
			Annotations:       annotations,
			OwnerReferences:   d.OwnerReferences,
			ManagedFields:     managedFields,
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: d.Spec.Replicas,
			Selector: d.Spec.Selector,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: templateLabels},
				Spec:       corev1.PodSpec{Containers: containers},
			},
		},
		Status: status,
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

// driftPrefixes are the parts of a Deployment whose ownership
// deploymentDrift asks about (desiredFields' paths all begin with one);
// nil stands for any key of a keyed list.
var driftPrefixes = [][]*fieldpath.PathElement{
	{named("metadata"), named("labels")},
	{named("metadata"), named("ownerReferences")},
	{named("spec"), named("replicas")},
	{named("spec"), named("selector")},
	{named("spec"), named("template"), named("metadata"), named("labels")},
	{named("spec"), named("template"), named("spec"), named("containers"), nil, named("image")},
	{named("spec"), named("template"), named("spec"), named("containers"), nil, named("resources")},
}

func named(name string) *fieldpath.PathElement { return &fieldpath.PathElement{FieldName: &name} }

// pruneOwnedFields keeps of one of this controller's managedFields entries
// the fields deploymentDrift asks about. The create that made the
// Deployment owns every field the API server defaulted too (strategy,
// restart and DNS policy, termination message path...): 60 % of the
// entry, kept for every Deployment, never read. Parsing and writing it
// back costs about 40 µs per watch event (BenchmarkTrimDeployment). An
// entry that does not parse is kept whole, so that appliedFields sees it
// fail as before. TestDriftPrefixesCoverDesiredFields keeps driftPrefixes
// and desiredFields in step.
func pruneOwnedFields(e metav1.ManagedFieldsEntry) metav1.ManagedFieldsEntry {
	if e.FieldsV1 == nil || e.Operation == metav1.ManagedFieldsOperationApply {
		// An apply owns what it sent, which is what drift asks about
		// already; parsing costs more than the few fields it would drop.
		return e
	}
	all := &fieldpath.Set{}
	if err := all.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
		return e
	}
	kept := &fieldpath.Set{}
	all.Iterate(func(p fieldpath.Path) {
		if underDriftPrefix(p) {
			kept.Insert(p.Copy())
		}
	})
	raw, err := kept.ToJSON()
	if err != nil {
		return e
	}
	e.FieldsV1 = &metav1.FieldsV1{Raw: bytes.Clone(raw)} // without the buffer's spare capacity
	return e
}

func underDriftPrefix(p fieldpath.Path) bool {
	for _, prefix := range driftPrefixes {
		if len(p) < len(prefix) {
			continue
		}
		match := true
		for i, pe := range prefix {
			if pe != nil && !p[i].Equals(*pe) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

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
		t.OwnerReferences = []metav1.OwnerReference{*ref}
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
