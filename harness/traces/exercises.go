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

package traces

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// The scenarios of docs/exercises.md that informer-traces.md does not
// tell: exercises 2, 6 and 7. Exercises 1, 3, 4 and 5 are the create,
// scale, rename and restart of run.go.

// deleteDeployment, exercise 2: someone deletes the Deployment the
// controller made. Its delete event leads to the Bar, and the sync finds
// no Deployment in the cache and creates it again: nothing said
// "recreate".
func (s *scenarios) deleteDeployment(ctx context.Context) error {
	from := s.logSize()
	// kubectl waits until the Deployment is gone (--wait defaults to
	// true), so the example-nginx that settle then waits for is the
	// controller's new one.
	if _, err := s.cluster.Kubectl(ctx, "delete", "deployment", "example-nginx"); err != nil {
		return err
	}
	return s.settle(ctx, "delete", from, "example-nginx", 2, "")
}

// The foreign Deployment of exercise 6, and the image it runs: any image
// does, since kwok fakes the Pods, and this is the one the exercise names.
const (
	blocker      = "blocker"
	blockerImage = "nginx:1.28.0"
)

// foreign, exercise 6: a Deployment the controller did not make holds the
// name the Bar is changed to. The controller leaves it alone and says so
// in the Bar's status (Ready False, DeploymentNotOwned) and in one Warning
// Event. Besides the log, it records what the two commands the exercise
// tells the learner to run print: kubectl get bar -o wide, and the Bar's
// Events.
//
// The controller is restarted at -v=2 first: restart-v6 left it at -v=6,
// where client-go logs every request, and Select keeps the watch requests
// among them. A watch that ends (after 5 to 10 minutes, at random) and
// starts again during the scenario would add lines that the controller of
// the exercise, make run's at -v=2, never prints. The restart is where
// exercise 5 leaves the learner too: the -v=6 controller stopped, make
// run's started again with Enter. Its relist is not part of the capture,
// which starts once the restarted controller's log has gone quiet.
func (s *scenarios) foreign(ctx context.Context) error {
	s.stop()
	if err := s.startController(ctx, 2); err != nil {
		return err
	}
	if err := s.waitFor(ctx, func(ctx context.Context) error { return s.converged(ctx, "example-web", 3, "") }); err != nil {
		return err
	}
	from, err := s.quietLog(ctx)
	if err != nil {
		return err
	}
	if _, err := s.cluster.Kubectl(ctx, "create", "deployment", blocker, "--image="+blockerImage); err != nil {
		return err
	}
	// The rename waits for blocker's rollout, so that the capture shows
	// the controller's answer to the rename alone; a learner who pastes
	// the commands at once sees blocker's status updates lead to more
	// syncs, each leaving it alone.
	if err := s.waitFor(ctx, s.blockerAvailable); err != nil {
		return err
	}
	if _, err := s.cluster.Kubectl(ctx, "patch", "bar", barName, "--type=merge", "-p", `{"spec":{"deployment":{"name":"`+blocker+`"}}}`); err != nil {
		return err
	}
	if err := s.waitFor(ctx, s.notOwned); err != nil {
		return err
	}
	if err := s.logged(ctx, "foreign", from); err != nil {
		return err
	}
	if err := s.command(ctx, "foreign-bar", "get", "bar", barName, "-o", "wide"); err != nil {
		return err
	}
	return s.command(ctx, "foreign-events", "get", "events", "--field-selector", "involvedObject.name="+barName)
}

// blockerAvailable is nil once the foreign Deployment has rolled out and
// kube-controller-manager has said so in its Progressing condition, its
// last status update: one after the rename would reach the Bar through
// the name index, and add a sync to the capture or not by timing.
func (s *scenarios) blockerAvailable(ctx context.Context) error {
	d, err := s.kube.AppsV1().Deployments(namespace).Get(ctx, blocker, metav1.GetOptions{})
	if err != nil {
		return err
	}
	progressing := ""
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			progressing = c.Reason
		}
	}
	if d.Status.ObservedGeneration != d.Generation || d.Status.AvailableReplicas != 1 || progressing != "NewReplicaSetAvailable" {
		return fmt.Errorf("Deployment %s: observedGeneration=%d/%d available=%d Progressing reason %q, want 1 and NewReplicaSetAvailable",
			blocker, d.Status.ObservedGeneration, d.Generation, d.Status.AvailableReplicas, progressing)
	}
	return nil
}

// notOwned is nil once the Bar reports, for its current generation, that
// the Deployment it names is not its own, and the Warning Event about it
// has reached the API server: the controller's Events are written in the
// background, after the status.
func (s *scenarios) notOwned(ctx context.Context) error {
	bar, err := s.bars.BarcontrollerV1().Bars(namespace).Get(ctx, barName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var reason string
	for _, c := range bar.Status.Conditions {
		if c.Type == "Ready" && c.Status == metav1.ConditionFalse {
			reason = c.Reason
		}
	}
	if bar.Status.ObservedGeneration != bar.Generation || reason != "DeploymentNotOwned" {
		return fmt.Errorf("Bar: observedGeneration=%d/%d, Ready False reason %q, want DeploymentNotOwned",
			bar.Status.ObservedGeneration, bar.Generation, reason)
	}
	n, err := localcluster.EventCount(ctx, s.kube, namespace, "Bar", barName, "DeploymentNotOwned")
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no DeploymentNotOwned Event for the Bar yet")
	}
	return nil
}

// foreignDelete, the end of exercise 6: the foreign Deployment is deleted.
// Its delete event reaches the Bar only through the name index (it never
// had the Bar as its controller), and the sync creates the Bar's own
// blocker. Once that is available, example-web, which kept serving since
// the rename to a name the Bar could not have, is deleted.
func (s *scenarios) foreignDelete(ctx context.Context) error {
	from := s.logSize()
	if _, err := s.cluster.Kubectl(ctx, "delete", "deployment", blocker); err != nil {
		return err
	}
	return s.settle(ctx, "foreign-delete", from, blocker, 3, "example-web")
}

// metricsShown is exercise 7's grep -E of the metrics.
var metricsShown = regexp.MustCompile(`^workqueue_|^bar_controller_syncs_total`)

// scrapeMetrics, exercise 7: what curl .../metrics | grep -E
// '^workqueue_|^bar_controller_syncs_total' prints, scraped from the
// controller that ran exercise 6 (plain HTTP: the scenarios run it with
// --metrics-secure=false, as make run does). The counts are that
// process's, since its start before foreign.
func (s *scenarios) scrapeMetrics(ctx context.Context) error {
	url := "http://" + s.metricsAddr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var shown []string
	for _, l := range strings.Split(string(body), "\n") {
		if metricsShown.MatchString(l) {
			shown = append(shown, l)
		}
	}
	s.out["metrics"] = shown
	return nil
}

// command records what kubectl prints for args as capture name.
func (s *scenarios) command(ctx context.Context, name string, args ...string) error {
	out, err := s.cluster.Kubectl(ctx, args...)
	if err != nil {
		return err
	}
	s.out[name] = strings.Split(strings.TrimRight(out, "\n"), "\n")
	return nil
}
