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
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/fake"
)

// The warm-up runs again after a steady step, on the namespaces the first
// left: taking them must not fail, where a timed run's namespace that
// exists is an error.
func TestASecondWarmUpReusesItsNamespaces(t *testing.T) {
	ctx, kube := context.Background(), fake.NewClientset()
	for i := range 2 {
		if err := reuseNamespace(ctx, kube, "warmup"); err != nil {
			t.Fatalf("warm-up %d: %v", i, err)
		}
	}
	if err := createNamespace(ctx, kube, "warmup"); !apierrors.IsAlreadyExists(err) {
		t.Errorf("createNamespace over an existing namespace = %v, want AlreadyExists", err)
	}
}
