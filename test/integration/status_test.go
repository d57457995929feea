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

package integration

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barac "github.com/barcontroller/bar-controller/pkg/generated/applyconfiguration/barcontroller/v1"
)

// TestStatusApplyIsRefusedForANamesake proves on the real API server
// what the controller's status write relies on (statusApplyConfiguration
// in status.go): a status apply is addressed by name, so one judged on a
// Bar that has since been deleted and created again under that name would
// land on the namesake. Its resourceVersion refuses it (Conflict, which
// the controller retries as caches behind the API server); its UID alone
// would not, for the status subresource copies the stored metadata over
// the request's before anything compares UIDs.
func TestStatusApplyIsRefusedForANamesake(t *testing.T) {
	env, ns := setupIntegration(t)
	t.Parallel()
	ctx := t.Context()
	createBar(t, env, ns, "reborn", "reborn", 1)
	old := waitForReady(t, env, ns, "reborn", 1)
	if err := env.bars.BarcontrollerV1().Bars(ns).Delete(ctx, "reborn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createBar(t, env, ns, "reborn", "reborn-2", 1)

	// What a sync that read the old Bar from its cache would write:
	// the old Bar's generation, Ready.
	stale := func() *barac.BarApplyConfiguration {
		return barac.Bar("reborn", ns).WithUID(old.UID).WithStatus(barac.BarStatus().
			WithObservedGeneration(old.Generation).WithAvailableReplicas(1).
			WithConditions(metav1ac.Condition().WithType(barv1.ConditionReady).WithStatus(metav1.ConditionTrue).
				WithReason(barv1.ReasonDeploymentAvailable).WithMessage(fromOldBar).
				WithObservedGeneration(old.Generation).WithLastTransitionTime(metav1.Now())))
	}
	apply := func(ac *barac.BarApplyConfiguration) error {
		_, err := env.bars.BarcontrollerV1().Bars(ns).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: "namesake-test", Force: true})
		return err
	}
	if err := apply(stale().WithResourceVersion(old.ResourceVersion)); !apierrors.IsConflict(err) {
		t.Fatalf("a status apply with the UID and resourceVersion of the deleted Bar: %v, want Conflict", err)
	}
	checkNotFromOldBar(t, env, ns)

	// The UID alone: applied to the namesake. (Should the API server
	// start to refuse this, the resourceVersion is still right, and this
	// comment and the one in status.go are wrong.)
	if err := apply(stale()); err != nil {
		t.Fatalf("a status apply with the UID of the deleted Bar alone: %v, want it applied (the UID dropped)", err)
	}
	eventually(t, "the controller to write the namesake's own Ready condition back", func(ctx context.Context) (bool, error) {
		bar, err := env.bars.BarcontrollerV1().Bars(ns).Get(ctx, "reborn", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady)
		return c != nil && c.Message != fromOldBar && c.Status == metav1.ConditionTrue && c.ObservedGeneration == bar.Generation, nil
	})
}

const fromOldBar = "from the old Bar"

func checkNotFromOldBar(t *testing.T, env *integrationEnv, ns string) {
	t.Helper()
	bar, err := env.bars.BarcontrollerV1().Bars(ns).Get(t.Context(), "reborn", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(bar.Status.Conditions, barv1.ConditionReady); c != nil && c.Message == fromOldBar {
		t.Errorf("the refused apply wrote the old Bar's condition onto the namesake: %+v", c)
	}
}
