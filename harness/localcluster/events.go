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

package localcluster

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// EventCount is how many times the controller reported reason about the
// object of this kind and name in namespace ns. The controller writes
// events.k8s.io/v1 Events (client-go tools/events): a repeat within a few
// minutes does not make a new Event but turns the first into a series, so
// the count is the series' count, or 1 for an Event that never repeated.
func EventCount(ctx context.Context, kube kubernetes.Interface, ns, kind, name, reason string) (int32, error) {
	events, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("regarding.kind", kind),
			fields.OneTermEqualSelector("regarding.name", name),
			fields.OneTermEqualSelector("reason", reason)).String(),
	})
	if err != nil {
		return 0, err
	}
	var n int32
	for _, e := range events.Items {
		if e.Series != nil {
			n += e.Series.Count
		} else {
			n += max(e.DeprecatedCount, 1)
		}
	}
	return n, nil
}
