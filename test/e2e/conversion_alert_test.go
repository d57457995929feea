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

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// conversionAlert is the alert that reads the API server's own count of
// its conversion webhook calls (artifacts/monitoring/prometheusrule.yaml).
const conversionAlert = "BarControllerConversionFailing"

// TestConversionAlertSeesTheAPIServer: the series BarControllerConversionFailing
// reads are the ones a real API server exports, and they count what the
// replicas' own metrics cannot see. A conversion-only replica serves the
// CRD's webhook; v1alpha1 reads of a Bar stored as v1 convert through it.
// Then the CRD's caBundle trusts another CA, so that every call fails the
// TLS handshake, and no review reaches the replica: the API server counts
// each failure under the alert's selectors while the replica's
// bar_controller_conversion_webhook_requests_total stands still (the old
// critical alert divided nothing by nothing). Then, trusted again, the
// replica is stopped: the refused connections count as failures too.
// Last, the API server's series as scraped, their increments in the
// converting and the failing phase, go through promtool test rules with
// the shipped rules: the alert is silent on the first, fires on the
// second.
func TestConversionAlertSeesTheAPIServer(t *testing.T) {
	env := startCertEnv(t)
	kubeconfig, _ := env.serviceAccountConfig(t)
	ns := createNamespace(t, env, "bar-alert")
	addrs, err := localcluster.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	pointCRDAtURL(t, env, addrs[0])
	// A keeper that passes rarely once ready, so that it puts no caBundle
	// back while the test has another in it.
	r := startKeeperReplica(t, "converter", kubeconfig, addrs[0], []string{"127.0.0.1"}, "--conversion-webhook-only",
		"--conversion-webhook-secret="+installNamespace+"/"+webhookSecret,
		"--conversion-webhook-cert-sync-period=10m", "--conversion-webhook-cert-grace-period=20m")
	waitSettled(t, env, installNamespace, time.Now(), nil, r)
	bar := createOpsBar(t, env, ns, "converted")
	alpha := env.bars.BarcontrollerV1alpha1().Bars(ns)
	readAlpha := func(ctx context.Context) error {
		_, err := alpha.Get(ctx, bar.Name, metav1.GetOptions{})
		return err
	}
	sel := alertSelectors(t)
	const calls = 5

	before := scrapeConversions(t, env)
	for range calls {
		if err := readAlpha(t.Context()); err != nil {
			t.Fatalf("v1alpha1 read through a ready replica: %v", err)
		}
	}
	converted := scrapeConversions(t, env)
	if ok, failed := converted.delta(before, sel), converted.delta(before, sel.failed()); ok < calls || failed != 0 {
		t.Errorf("after %d converted reads the API server counts %v calls under the alert's selector, %v failed; want at least %d and 0", calls, ok, failed, calls)
	}

	// Untrusted: a caBundle of another CA.
	ext := apiextensionsclient.NewForConfigOrDie(env.cluster.Config)
	other, _, err := cert.GenerateSelfSignedCertKey("not-the-webhook", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	setBundle := func(bundle []byte) {
		t.Helper()
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), barsCRD, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		crd.Spec.Conversion.Webhook.ClientConfig.CABundle = bundle
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Update(t.Context(), crd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	trusted := crdBundle(readState(t, env).crd)
	setBundle(other)
	// The API server takes the new caBundle up a moment after the write.
	eventually(t, "v1alpha1 reads to fail the TLS handshake", func(ctx context.Context) (bool, error) {
		err := readAlpha(ctx)
		return err != nil && strings.Contains(err.Error(), "x509"), nil
	})
	untrusted := scrapeConversions(t, env)
	reviews := r.scrape(t)
	for range calls {
		if err := readAlpha(t.Context()); err == nil || !strings.Contains(err.Error(), "x509") {
			t.Fatalf("v1alpha1 read with a caBundle of another CA: %v, want the handshake's x509 error", err)
		}
	}
	failing := scrapeConversions(t, env)
	if failed := failing.delta(untrusted, sel.failed()); failed < calls {
		t.Errorf("after %d reads that failed the TLS handshake the API server counts %v failed calls under the alert's selector, want at least %d", calls, failed, calls)
	}
	if ok := failing.delta(untrusted, sel); ok != failing.delta(untrusted, sel.failed()) {
		t.Errorf("the API server counted %v calls and %v failures while none could succeed", ok, failing.delta(untrusted, sel.failed()))
	}
	got, _ := r.scrape(t).Value("bar_controller_conversion_webhook_requests_total", nil)
	if want, _ := reviews.Value("bar_controller_conversion_webhook_requests_total", nil); got != want {
		t.Errorf("the replica counted %v reviews while the API server could not call it, want none", got-want)
	}

	// Unreachable: trusted again, then no replica listens.
	setBundle(trusted)
	eventually(t, "v1alpha1 reads to convert again", func(ctx context.Context) (bool, error) { return readAlpha(ctx) == nil, nil })
	r.Stop(40 * time.Second)
	eventually(t, "v1alpha1 reads to fail with the replica stopped", func(ctx context.Context) (bool, error) {
		return readAlpha(ctx) != nil, nil
	})
	stopped := scrapeConversions(t, env)
	for range calls {
		if err := readAlpha(t.Context()); err == nil {
			t.Fatal("v1alpha1 read succeeded with no replica")
		}
	}
	if failed := scrapeConversions(t, env).delta(stopped, sel.failed()); failed < calls {
		t.Errorf("after %d reads with no replica the API server counts %v failed calls under the alert's selector, want at least %d", calls, failed, calls)
	}

	t.Logf("the API server's %s after both failing phases:\n%s", conversionMetric, scrapeConversions(t, env))
	checkAlertOnRealSeries(t, sel, before, converted, untrusted, failing)
}

// conversionSeries is one scrape of the API server's
// apiserver_crd_conversion_webhook_duration_seconds, the call counts of
// its histogram by label set.
type conversionSeries map[string]seriesCount

type seriesCount struct {
	labels labels.Labels
	count  float64
}

const conversionMetric = "apiserver_crd_conversion_webhook_duration_seconds"

func scrapeConversions(t *testing.T, env *opsEnv) conversionSeries {
	t.Helper()
	raw, err := env.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("scraping the API server: %v", err)
	}
	text := expfmt.NewTextParser(model.UTF8Validation)
	families, err := text.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("parsing the API server's metrics: %v", err)
	}
	out := conversionSeries{}
	f := families[conversionMetric]
	if f == nil {
		return out
	}
	if f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("the API server's %s is a %s, want a histogram (the alert reads its _count)", conversionMetric, f.GetType())
	}
	for _, m := range f.GetMetric() {
		b := labels.NewScratchBuilder(len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			b.Add(l.GetName(), l.GetValue())
		}
		b.Sort()
		ls := b.Labels()
		out[ls.String()] = seriesCount{ls, float64(m.GetHistogram().GetSampleCount())}
	}
	return out
}

// delta is how many calls the series matching sel counted since before.
func (s conversionSeries) delta(before conversionSeries, sel matchers) float64 {
	total := 0.0
	for key, c := range s {
		if sel.matches(c.labels) {
			total += c.count - before[key].count
		}
	}
	return total
}

// matchers are the label matchers of the alert's selectors of the API
// server's series: those of the one that selects every call, and those
// the failures' selector has besides.
type matchers struct{ all, failures []*labels.Matcher }

func (m matchers) failed() matchers { return matchers{all: slices.Concat(m.all, m.failures)} }

func (m matchers) matches(ls labels.Labels) bool {
	for _, x := range m.all {
		if !x.Matches(ls.Get(x.Name)) {
			return false
		}
	}
	return true
}

// alertSelectors reads the alert's expression from the shipped rules:
// it must select conversionMetric's _count twice, once every call of the
// CRD and once its failures, and nothing else.
func alertSelectors(t *testing.T) matchers {
	t.Helper()
	expr := shippedAlert(t, conversionAlert)["expr"].(string)
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %v", conversionAlert, err)
	}
	var sels [][]*labels.Matcher
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name != conversionMetric+"_count" {
				t.Errorf("%s selects %s, want only %s_count", conversionAlert, vs, conversionMetric)
			}
			sels = append(sels, slices.DeleteFunc(slices.Clone(vs.LabelMatchers), func(m *labels.Matcher) bool { return m.Name == labels.MetricName }))
		}
		return nil
	})
	if len(sels) != 2 {
		t.Fatalf("%s has %d selectors, want 2 (the failures, every call)", conversionAlert, len(sels))
	}
	slices.SortFunc(sels, func(a, b []*labels.Matcher) int { return len(a) - len(b) })
	m := matchers{all: sels[0]}
	for _, x := range sels[1] {
		if !slices.ContainsFunc(m.all, func(y *labels.Matcher) bool { return y.String() == x.String() }) {
			m.failures = append(m.failures, x)
		}
	}
	if len(m.failures) == 0 {
		t.Fatalf("%s: its two selectors select the same series", conversionAlert)
	}
	return m
}

func createNamespace(t *testing.T, env *opsEnv, name string) string {
	t.Helper()
	if _, err := env.cluster.Kubectl(t.Context(), "create", "namespace", name); err != nil {
		t.Fatal(err)
	}
	return name
}

func readState(t *testing.T, env *opsEnv) keeperState {
	t.Helper()
	st, err := readKeeperState(t.Context(), env, installNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (s conversionSeries) String() string {
	var lines []string
	for _, c := range s {
		lines = append(lines, fmt.Sprintf("%s %v", c.labels, c.count))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
