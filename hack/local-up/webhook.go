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

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/barcontroller/bar-controller/internal/conversion"
)

// localWebhook prepares the cluster for a conversion webhook served by the
// controller on addr, this machine, as artifacts/install prepares it for
// the Deployment's replicas: the namespace and the empty Secret the
// controller keeps the certificate in. The CRD names the Service of
// artifacts/install, which a controller out of cluster is not behind (and
// this control plane has no kube-proxy to reach a Service anyway), so its
// clientConfig is pointed at addr instead: the API server and the
// controller share this machine. The controller then fills the caBundle.
func localWebhook(ctx context.Context, kube kubernetes.Interface, ext apiextensionsclient.Interface, addr string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: conversion.InstallNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: conversion.SecretName}, Type: corev1.SecretTypeOpaque}
	if _, err := kube.CoreV1().Secrets(ns.Name).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Secret %s/%s: %w", ns.Name, secret.Name, err)
	}
	url := "https://" + addr + conversion.Path
	patch, err := json.Marshal([]map[string]any{
		{"op": "remove", "path": "/spec/conversion/webhook/clientConfig/service"},
		{"op": "add", "path": "/spec/conversion/webhook/clientConfig/url", "value": url},
	})
	if err != nil {
		return err
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, conversion.CRDName, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("pointing the conversion webhook of CustomResourceDefinition %s at %s: %w", conversion.CRDName, url, err)
	}
	fmt.Printf("    the CRD's conversion webhook: %s (served by bar-controller, --conversion-webhook-bind-address)\n", url)
	return nil
}
