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

package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	barv1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1"
	barv1alpha1 "github.com/barcontroller/bar-controller/pkg/apis/barcontroller/v1alpha1"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

const (
	reviewsMetric = "bar_controller_conversion_webhook_requests_total"
	// trafficPeriod is how often the readers get the Bar in v1alpha1 while
	// the leader Pod goes, and the shortest round of the writer's get and
	// update (alphaTraffic).
	trafficPeriod = 75 * time.Millisecond
	// afterReplacement is how long the client goes on once the old Pod is
	// gone and its replacement is Ready: a webhook that fails only once the
	// new Pod takes requests shows up here.
	afterReplacement = 3 * time.Second
	// minGets and minUpdates are the fewest answers to requests sent after
	// the delete for the window to prove anything. The window lasts longer
	// than afterReplacement, in which the readers alone send 40 gets; the
	// writer's rate follows how fast the answers come: 10-12 updates a
	// second here with the 2 cores shared (load average 8), so 10 leaves a
	// slower machine room without letting a writer that stalled pass.
	minGets    = 30
	minUpdates = 10
)

// TestConversionThroughServiceSurvivesLeaderDeletion: the shipped manifests
// with two replicas serve conversion through the bar-controller-webhook
// Service, and deleting the leader Pod (the kubelet's SIGTERM) does not
// interrupt it: the other replica converts all along. The API server
// reaches the webhook as in any cluster: the CRD names the Service, the
// API server resolves it to a Ready endpoint of its EndpointSlices
// (--enable-aggregator-routing, see realnode.APIServerFlags, standing in
// for kube-proxy) and verifies the certificate for
// bar-controller-webhook.bar-controller.svc.
func TestConversionThroughServiceSurvivesLeaderDeletion(t *testing.T) {
	e := requireNode(t)
	install(t, e)
	ctx := t.Context()
	pods := waitReadyReplicas(t, e)
	checkCRDNamesService(t, e)
	reader, _ := localcluster.MetricsScrapers(t, e.kube, "default", "conversion")
	begin := time.Now()

	ns, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: barNamespacePrefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	if _, err := e.bars.BarcontrollerV1().Bars(ns.Name).Create(ctx, &barv1.Bar{
		ObjectMeta: metav1.ObjectMeta{Name: "conv"},
		Spec: barv1.BarSpec{Deployment: barv1.BarDeployment{Name: "conv-app"}, Replicas: ptr.To[int32](0),
			Template: barv1.BarPodTemplate{Image: appRef, Resources: resources}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Once the controller has written the status, nothing else writes the
	// Bar. Then read and write it in v1alpha1, counting the reviews the
	// Pods answered.
	waitAvailable(t, e, ns.Name, "conv", 0)
	before := scrapeReviews(t, pods, reader)
	// Without the deprecation warning client-go would log for every answer,
	// and without its rate limit (5 a second), which would hold back the
	// readers.
	quiet := rest.CopyConfig(e.cluster.Config)
	quiet.WarningHandler = rest.NoWarnings{}
	quiet.QPS = -1
	alpha := clientset.NewForConfigOrDie(quiet).BarcontrollerV1alpha1().Bars(ns.Name)
	old, err := alpha.Get(ctx, "conv", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get in v1alpha1: %v", err)
	}
	if old.Spec.DeploymentName != "conv-app" || old.Spec.Image != appRef || old.Annotations[barv1alpha1.ResourcesAnnotation] == "" {
		t.Fatalf("read in v1alpha1, not converted from v1: spec %+v, annotations %v", old.Spec, old.Annotations)
	}
	old.Labels = map[string]string{"written-in": "v1alpha1"}
	old.Spec.Replicas = ptr.To[int32](1)
	if _, err := alpha.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update in v1alpha1: %v", err)
	}
	after := scrapeReviews(t, pods, reader)
	var answered float64
	for _, p := range pods {
		n := after[p.Name].success - before[p.Name].success
		answered += n
		t.Logf("Pod %s answered %v ConversionReviews around one get and one update in v1alpha1", p.Name, n)
		if f := after[p.Name].failed - before[p.Name].failed; f != 0 {
			t.Errorf("Pod %s failed %v ConversionReviews", p.Name, f)
		}
	}
	// A get costs one review, an update at least two (docs/api-versions.md).
	if answered < 3 {
		t.Errorf("the Pods answered %v ConversionReviews, want at least 3: the API server did not convert through them", answered)
	}
	v1bar, err := e.bars.BarcontrollerV1().Bars(ns.Name).Get(ctx, "conv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v1bar.Spec.Deployment.Name != "conv-app" || ptr.Deref(v1bar.Spec.Replicas, 0) != 1 || v1bar.Labels["written-in"] != "v1alpha1" ||
		!apiequality.Semantic.DeepEqual(v1bar.Spec.Template.Resources, resources) {
		t.Errorf("after the v1alpha1 update, read in v1: labels %v, spec %+v; want the update and resources %+v", v1bar.Labels, v1bar.Spec, resources)
	}
	if _, ok := v1bar.Annotations[barv1alpha1.ResourcesAnnotation]; ok {
		t.Errorf("v1 carries %s: the write was not converted", barv1alpha1.ResourcesAnnotation)
	}

	// The controller acts on the write; its status writes settle before
	// the window.
	waitAvailable(t, e, ns.Name, "conv", 1)

	// The claim is about the delete, so the window starts from two Ready
	// replicas. A replica that stalled before it (the kubelet's liveness
	// probe restarts it; docs/measurements/tests-and-real-node.md) is
	// another fault: it is reported, and the window waits for it to be Ready.
	pods = waitReadyReplicas(t, e)
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Logf("before the window: controller Pod %s was restarted %d times (last state %+v)", p.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
			}
		}
	}
	// Now the leader goes while clients keep using v1alpha1.
	var lead *corev1.Pod
	localcluster.Eventually(t, "a Lease holder among the Pods", func(context.Context) (bool, error) {
		_, lead = leader(t, e, pods)
		return lead != nil, nil
	})
	var survivor corev1.Pod
	for _, p := range pods {
		if p.Name != lead.Name {
			survivor = p
		}
	}
	survivorBefore := scrapeReviews(t, []corev1.Pod{survivor}, reader)[survivor.Name]
	c := &alphaTraffic{bars: alpha, name: "conv", deployment: "conv-app"}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.run(trafficCtx) }()
	time.Sleep(time.Second) // traffic through both replicas first

	deleted, h := deleteAndWatch(t, e, pods, lead.Name)
	replacement := h.replacement
	time.Sleep(afterReplacement)
	stopTraffic()
	<-done
	end := time.Now()

	t.Logf("leader Pod %s deleted: out of the webhook's EndpointSlice as Ready after %v, its container stopped after %v, Pod gone after %v; replacement %s Ready after %v",
		lead.Name, h.unready, h.exited, h.gone, replacement.Name, h.ready)
	if _, _, _, _, before := c.since(time.Time{}, deleted); len(before) > 0 {
		// With two Ready replicas, none is expected; not the delete's doing.
		t.Logf("%d v1alpha1 requests failed before the delete, while two replicas were Ready: %q", len(before), before)
	}
	gets, updates, conflicts, _, _ := c.since(deleted, deleted.Add(h.gone))
	t.Logf("sent while the old Pod was terminating: %d gets and %d updates answered, %d update conflicts", gets, updates, conflicts)
	gets, updates, conflicts, slowest, failures := c.since(deleted, end)
	t.Logf("sent from the delete until %v after both: %d gets and %d updates answered (%d update conflicts with the controller's own writes), %d failed, slowest answer %v",
		afterReplacement, gets, updates, conflicts, len(failures), slowest)
	for _, f := range failures {
		t.Errorf("a v1alpha1 request failed: %s", f)
	}
	if gets < minGets || updates < minUpdates {
		t.Errorf("only %d gets and %d updates answered after the delete, want %d and %d: the window proves nothing", gets, updates, minGets, minUpdates)
	}
	newPods := []corev1.Pod{survivor, *replacement}
	final := scrapeReviews(t, newPods, reader)
	t.Logf("ConversionReviews answered from the traffic's start: %v by the surviving Pod %s, %v by the replacement %s",
		final[survivor.Name].success-survivorBefore.success, survivor.Name, final[replacement.Name].success, replacement.Name)
	if final[survivor.Name].success <= survivorBefore.success {
		t.Errorf("the surviving Pod %s answered no ConversionReview while the leader went", survivor.Name)
	}
	base := map[string]reviews{survivor.Name: survivorBefore}
	for _, p := range newPods {
		if f := final[p.Name].failed - base[p.Name].failed; f != 0 {
			t.Errorf("Pod %s failed %v ConversionReviews in the window", p.Name, f)
		}
	}
	// The API server's own conversions (its v1alpha1 watch cache converts
	// every Bar written) have no client to fail; its log says if one did.
	if lines := apiserverConversionErrors(t, e, begin, end); len(lines) > 0 {
		t.Errorf("kube-apiserver logged %d failed conversions:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	last, err := e.bars.BarcontrollerV1().Bars(ns.Name).Get(ctx, "conv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(last.Spec.Template.Resources, resources) {
		t.Errorf("after %d v1alpha1 updates, spec.template.resources in v1 is %+v, want %+v", updates, last.Spec.Template.Resources, resources)
	}
	if t.Failed() {
		// A Pod that stalls on this node (docs/measurements/tests-and-real-node.md)
		// shows in the kubelet's probes and the Pods' logs.
		t.Log("the conversion window failed; the node's account of it follows")
		explainSlow(t, e, ns.Name, begin)
	}
	waitReadyReplicas(t, e) // what the next test expects
}

// checkCRDNamesService: the CRD converts by webhook, through the Service
// (not a URL), and trusts a CA the controller put there.
func checkCRDNamesService(t *testing.T, e *env) {
	t.Helper()
	ext, err := apiextensionsclient.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), "bars.barcontroller.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		t.Fatalf("the CRD does not convert by webhook: %+v", conv)
	}
	cc := conv.Webhook.ClientConfig
	want := apiextensionsv1.ServiceReference{Namespace: installNamespace, Name: "bar-controller-webhook", Path: ptr.To("/convert"), Port: ptr.To[int32](443)}
	if cc.URL != nil || cc.Service == nil || !apiequality.Semantic.DeepEqual(*cc.Service, want) || len(cc.CABundle) == 0 {
		t.Fatalf("the CRD's clientConfig: url %v, service %+v, caBundle %d bytes; want service %+v and a caBundle",
			ptr.Deref(cc.URL, ""), cc.Service, len(cc.CABundle), want)
	}
}

type reviews struct{ success, failed float64 }

// scrapeReviews reads each Pod's count of ConversionReviews, as Prometheus
// would: at the Pod's IP, with a token bound to the metrics reader role.
func scrapeReviews(t *testing.T, pods []corev1.Pod, token string) map[string]reviews {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed; see TestMetricsScrapedFromThePod
	}}
	out := map[string]reviews{}
	for _, p := range pods {
		// A scrape costs the Pod a TokenReview and a SubjectAccessReview;
		// on a loaded machine one may miss the client's timeout.
		var m localcluster.Metrics
		var err error
		_ = wait.PollUntilContextTimeout(t.Context(), time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
			m, err = localcluster.Scrape(client, "https://"+net.JoinHostPort(p.Status.PodIP, "8443")+"/metrics", token)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("scraping Pod %s: %v", p.Name, err)
		}
		ok, _ := m.Value(reviewsMetric, map[string]string{"result": "success"})
		failed, _ := m.Value(reviewsMetric, map[string]string{"result": "failure"})
		invalid, _ := m.Value(reviewsMetric, map[string]string{"result": "invalid"})
		out[p.Name] = reviews{success: ok, failed: failed + invalid}
	}
	return out
}

// handover is when, after the delete, the API server's view of the old
// Pod and its replacement changed, as seen through watches (prompter than
// polls on a loaded machine).
type handover struct {
	replacement *corev1.Pod
	// unready: the webhook Service's EndpointSlice no longer offers the old
	// Pod as Ready; exited: its container has stopped; gone: it is deleted;
	// ready: the replacement is Ready.
	unready, exited, gone, ready time.Duration
}

// deleteAndWatch deletes the Pod old, as the kubelet then sends it SIGTERM,
// and follows the Pods and the webhook Service's EndpointSlices until old
// is gone and a Pod not among pods is Ready.
func deleteAndWatch(t *testing.T, e *env, pods []corev1.Pod, old string) (time.Time, handover) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	podEvents, err := e.kube.CoreV1().Pods(installNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bar-controller"})
	if err != nil {
		t.Fatal(err)
	}
	defer podEvents.Stop()
	sliceEvents, err := e.kube.DiscoveryV1().EndpointSlices(installNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=bar-controller-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	defer sliceEvents.Stop()
	deleted := time.Now()
	if err := e.kube.CoreV1().Pods(installNamespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var h handover
	at := func(d *time.Duration) {
		if *d == 0 {
			*d = time.Since(deleted).Round(time.Millisecond)
		}
	}
	for h.gone == 0 || h.ready == 0 || h.unready == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("after deleting %s: %+v", old, h)
		case ev, ok := <-podEvents.ResultChan():
			p, isPod := ev.Object.(*corev1.Pod)
			if !ok || !isPod {
				t.Fatalf("the watch of Pods ended: %+v", ev.Object)
			}
			known := slices.ContainsFunc(pods, func(o corev1.Pod) bool { return o.Name == p.Name })
			switch {
			case p.Name == old && ev.Type == watch.Deleted:
				at(&h.gone)
			case p.Name == old && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated != nil:
				at(&h.exited)
			case !known && ev.Type != watch.Deleted && p.DeletionTimestamp == nil && podReady(p) && h.ready == 0:
				h.replacement = p
				at(&h.ready)
			}
		case ev, ok := <-sliceEvents.ResultChan():
			slice, isSlice := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok || !isSlice {
				t.Fatalf("the watch of EndpointSlices ended: %+v", ev.Object)
			}
			offered := slices.ContainsFunc(slice.Endpoints, func(ep discoveryv1.Endpoint) bool {
				return ep.TargetRef != nil && ep.TargetRef.Name == old && ptr.Deref(ep.Conditions.Ready, true)
			})
			if !offered || ev.Type == watch.Deleted {
				at(&h.unready)
			}
		}
	}
	if h.exited == 0 {
		h.exited = h.gone // no status with the container stopped came before the delete
	}
	return deleted, h
}

// apiserverConversionErrors returns kube-apiserver's log lines between from
// and to that report a failed call of the Bar conversion webhook.
func apiserverConversionErrors(t *testing.T, e *env, from, to time.Time) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(e.cluster.Dir, "logs", "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		m := klogLine.FindStringSubmatch(s.Text())
		if m == nil || !strings.Contains(s.Text(), "conversion webhook for barcontroller.dev") {
			continue
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", from.Year(), m[2]), time.Local)
		if err == nil && !at.Before(from.Truncate(time.Second)) && !at.After(to) {
			lines = append(lines, s.Text())
		}
	}
	return lines
}
