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

package charts

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/barcontroller/bar-controller/internal/conversion"
)

// valueCase is one value of the chart README's table: values that set it
// and what the rendering must then hold, and a bad setting of it that the
// schema must refuse with an error naming it (its path, as helm's
// validator prints it: at '/extraArgs/0').
type valueCase struct {
	name    string
	values  string
	check   func(t *testing.T, r rendered)
	bad     string
	wantErr string
}

func container(r rendered) corev1.Container { return r.deployment.Spec.Template.Spec.Containers[0] }

// The securityContexts of artifacts/install/deployment.yaml, as yamlOf
// prints them (TestChartMatchesKustomize holds the defaults to those).
const (
	shippedPodSecurityContext = "runAsGroup: 65532\nrunAsNonRoot: true\nrunAsUser: 65532\nseccompProfile:\n  type: RuntimeDefault"
	shippedSecurityContext    = "allowPrivilegeEscalation: false\ncapabilities:\n  drop:\n  - ALL\nreadOnlyRootFilesystem: true"
)

var valueCases = []valueCase{
	{"image.registry replaces a registry", "image: {registry: mirror.example:5000, repository: ghcr.io/acme/bar-controller, digest: sha256:" + strings.Repeat("a", 64) + "}",
		func(t *testing.T, r rendered) {
			if got, want := container(r).Image, "mirror.example:5000/acme/bar-controller@sha256:"+strings.Repeat("a", 64); got != want {
				t.Errorf("image %s, want %s", got, want)
			}
		}, "image: {registry: Mirror/}", "/image/registry"},
	{"image.registry with a path", "image: {registry: harbor.example/ghcr-proxy, repository: ghcr.io/acme/bar-controller}",
		func(t *testing.T, r rendered) {
			if got := container(r).Image; got != "harbor.example/ghcr-proxy/acme/bar-controller:dev" {
				t.Errorf("image %s, want harbor.example/ghcr-proxy/acme/bar-controller:dev", got)
			}
		}, "image: {registry: harbor.example/Proxy}", "/image/registry"},
	{"image.registry before a repository without one", "image: {registry: mirror.example}",
		func(t *testing.T, r rendered) {
			if got := container(r).Image; got != "mirror.example/bar-controller:dev" {
				t.Errorf("image %s, want mirror.example/bar-controller:dev", got)
			}
		}, "image: {registry: [mirror]}", "/image/registry"},
	{"imagePullSecrets", "imagePullSecrets: [{name: regcred}]",
		func(t *testing.T, r rendered) {
			if got := r.deployment.Spec.Template.Spec.ImagePullSecrets; len(got) != 1 || got[0].Name != "regcred" {
				t.Errorf("imagePullSecrets %v", got)
			}
		}, "imagePullSecrets: [regcred]", "/imagePullSecrets/0"},
	{"serviceAccount.create=false and name", "serviceAccount: {create: false, name: ops-controller}",
		func(t *testing.T, r rendered) {
			if got := r.deployment.Spec.Template.Spec.ServiceAccountName; got != "ops-controller" {
				t.Errorf("serviceAccountName %s", got)
			}
			for key, obj := range r.objects {
				if strings.HasPrefix(key, "ServiceAccount/") {
					t.Errorf("%s rendered with serviceAccount.create=false", key)
				}
				for _, s := range asList(obj["subjects"]) {
					if s := s.(map[string]any); s["kind"] == "ServiceAccount" && s["name"] != "ops-controller" {
						t.Errorf("%s binds %v, want ops-controller", key, s)
					}
				}
			}
			if p := yamlOf(t, r.objects["ValidatingAdmissionPolicy/<nil>/crd-changes.barcontroller.dev"]); !strings.Contains(p, "system:serviceaccount:bar-controller:ops-controller") {
				t.Error("the CRD's policy does not admit the caBundle writes of ops-controller")
			}
		}, "serviceAccount: {create: maybe}", "/serviceAccount/create"},
	{"serviceAccount.annotations", "serviceAccount: {name: ops, annotations: {iam.example/role: controller}}",
		func(t *testing.T, r rendered) {
			sa := r.objects["ServiceAccount/bar-controller/ops"]
			if sa == nil || yamlOf(t, sa["metadata"].(map[string]any)["annotations"]) != "iam.example/role: controller" {
				t.Errorf("ServiceAccount %v, want ops annotated iam.example/role: controller", sa)
			}
		}, "serviceAccount: {name: Ops}", "/serviceAccount/name"},
	{"commonLabels", "commonLabels: {team: platform}",
		func(t *testing.T, r rendered) {
			for key, obj := range r.objects {
				if labels(obj)["team"] != "platform" {
					t.Errorf("%s: labels %v, want team=platform", key, labels(obj))
				}
			}
			if sel := r.deployment.Spec.Selector.MatchLabels; len(sel) != 1 {
				t.Errorf("the Deployment's selector %v: commonLabels must stay out of it (immutable)", sel)
			}
		}, "commonLabels: {app.kubernetes.io/name: other}", "/commonLabels/app.kubernetes.io~1name"},
	{"podLabels", "podLabels: {sidecar.example/inject: \"false\"}",
		func(t *testing.T, r rendered) {
			if l := r.deployment.Spec.Template.Labels; l["sidecar.example/inject"] != "false" || l["app.kubernetes.io/name"] != "bar-controller" {
				t.Errorf("Pod labels %v", l)
			}
			if l := r.deployment.Labels; l["sidecar.example/inject"] != "" {
				t.Errorf("the Deployment's own labels %v: podLabels are the Pods'", l)
			}
		}, "podLabels: {barcontroller.dev/conversion-webhook: off}", "/podLabels/barcontroller.dev~1conversion-webhook"},
	{"podAnnotations", "podAnnotations: {prometheus.io/scrape: \"false\"}",
		func(t *testing.T, r rendered) {
			if a := r.deployment.Spec.Template.Annotations; a["prometheus.io/scrape"] != "false" {
				t.Errorf("Pod annotations %v", a)
			}
		}, "podAnnotations: {-bad: x}", "/podAnnotations"},
	{"extraArgs", "extraArgs: [--workers=8, --profiling]",
		func(t *testing.T, r rendered) {
			if args := container(r).Args; !slices.Equal(args[len(args)-2:], []string{"--workers=8", "--profiling"}) {
				t.Errorf("args %v, want --workers=8 --profiling after the chart's", args)
			}
		}, "extraArgs: [--metrics-secure=false]", "/extraArgs/0"},
	{"extraArgs that are no flag", "", nil, "extraArgs: [workers=8]", "/extraArgs/0"},
	{"extraEnv", "extraEnv: [{name: GODEBUG, value: http2debug=1}, {name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
		func(t *testing.T, r rendered) {
			env := container(r).Env
			if n := len(env); n < 2 || env[n-2].Name != "GODEBUG" || env[n-2].Value != "http2debug=1" || env[n-1].ValueFrom.SecretKeyRef.Name != "s" {
				t.Errorf("env %v, want GODEBUG and TOKEN after the chart's", env)
			}
		}, "extraEnv: [{name: GOMEMLIMIT, value: 1GiB}]", "/extraEnv/0/name"},
	{"extraVolumes and extraVolumeMounts", "extraVolumes: [{name: metrics-tls, secret: {secretName: metrics-tls}}]\nextraVolumeMounts: [{name: metrics-tls, mountPath: /certs, readOnly: true}]",
		func(t *testing.T, r rendered) {
			v := r.deployment.Spec.Template.Spec.Volumes
			m := container(r).VolumeMounts
			if len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "metrics-tls" || len(m) != 1 || m[0].MountPath != "/certs" || !m[0].ReadOnly {
				t.Errorf("volumes %v, mounts %v", v, m)
			}
		}, "extraVolumes: [{name: Certs, secret: {}}]", "/extraVolumes/0/name"},
	{"extraVolumeMounts need a path", "", nil, "extraVolumeMounts: [{name: certs, mountPath: certs}]", "/extraVolumeMounts/0/mountPath"},
	{"nodeSelector by default", "",
		func(t *testing.T, r rendered) {
			if ns := r.deployment.Spec.Template.Spec.NodeSelector; len(ns) != 1 || ns["kubernetes.io/os"] != "linux" {
				t.Errorf("nodeSelector %v, want kubernetes.io/os: linux alone", ns)
			}
		}, "nodeSelector: {kubernetes.io/os: 1}", "/nodeSelector/kubernetes.io~1os"},
	{"nodeSelector set", "nodeSelector: {kubernetes.io/os: null, pool: system}",
		func(t *testing.T, r rendered) {
			if ns := r.deployment.Spec.Template.Spec.NodeSelector; len(ns) != 1 || ns["pool"] != "system" {
				t.Errorf("nodeSelector %v, want pool: system alone", ns)
			}
		}, "nodeSelector: {-pool: system}", "/nodeSelector"},
	{"tolerations", "tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]",
		func(t *testing.T, r rendered) {
			if tl := r.deployment.Spec.Template.Spec.Tolerations; len(tl) != 1 || tl[0].Key != "dedicated" || tl[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("tolerations %v", tl)
			}
		}, "tolerations: [{key: dedicated, effect: Sometimes}]", "/tolerations/0/effect"},
	{"affinity", "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}",
		func(t *testing.T, r rendered) {
			if a := r.deployment.Spec.Template.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
				t.Errorf("affinity %v", a)
			}
		}, "affinity: {nodeAfinity: {}}", "/affinity"},
	{"topologySpreadConstraints get the chart's selector", "topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]",
		func(t *testing.T, r rendered) {
			c := r.deployment.Spec.Template.Spec.TopologySpreadConstraints
			if len(c) != 1 || c[0].TopologyKey != "topology.kubernetes.io/zone" || c[0].LabelSelector == nil || c[0].LabelSelector.MatchLabels["app.kubernetes.io/name"] != "bar-controller" {
				t.Errorf("constraints %v, want the zone's, selecting app.kubernetes.io/name=bar-controller", c)
			}
		}, "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone}]", "/topologySpreadConstraints/0"},
	{"topologySpreadConstraints: [] is none", "topologySpreadConstraints: []",
		func(t *testing.T, r rendered) {
			if c := r.deployment.Spec.Template.Spec.TopologySpreadConstraints; len(c) != 0 {
				t.Errorf("constraints %v, want none", c)
			}
		}, "topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]", "/topologySpreadConstraints/0/maxSkew"},
	{"priorityClassName", "priorityClassName: system-cluster-critical",
		func(t *testing.T, r rendered) {
			if p := r.deployment.Spec.Template.Spec.PriorityClassName; p != "system-cluster-critical" {
				t.Errorf("priorityClassName %q", p)
			}
		}, "priorityClassName: Critical", "/priorityClassName"},
	// OpenShift's restricted-v2 assigns the user from the namespace's
	// range and refuses a Pod that names another.
	{"podSecurityContext without runAsUser", "podSecurityContext: {runAsUser: null, runAsGroup: null}",
		func(t *testing.T, r rendered) {
			sc := r.deployment.Spec.Template.Spec.SecurityContext
			if sc == nil || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil {
				t.Errorf("Pod securityContext %s, want runAsNonRoot and seccompProfile, no user or group", yamlOf(t, sc))
			}
		}, "podSecurityContext: {runAsUser: -1}", "/podSecurityContext/runAsUser"},
	// Absent, as in a release upgraded with --reuse-values from a chart
	// without the value: the shipped one, or Pod Security's restricted
	// level would refuse the Pods.
	{"podSecurityContext absent is the shipped one", "podSecurityContext: null\nsecurityContext: null",
		func(t *testing.T, r rendered) {
			pod, c := yamlOf(t, r.deployment.Spec.Template.Spec.SecurityContext), yamlOf(t, container(r).SecurityContext)
			if pod != shippedPodSecurityContext || c != shippedSecurityContext {
				t.Errorf("securityContexts\n%s\nand\n%s\nwant the shipped ones", pod, c)
			}
		}, "podSecurityContext: {runAsUSer: 1000}", "/podSecurityContext"},
	{"securityContext", "securityContext: {runAsUser: 1001}",
		func(t *testing.T, r rendered) {
			sc := container(r).SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1001 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("container securityContext %s, want runAsUser 1001 beside the defaults", yamlOf(t, sc))
			}
		}, "securityContext: {capabilities: {drop: ALL}}", "/securityContext/capabilities/drop"},
	{"ephemeral-storage by default", "",
		func(t *testing.T, r rendered) {
			res := container(r).Resources
			req, lim := res.Requests[corev1.ResourceEphemeralStorage], res.Limits[corev1.ResourceEphemeralStorage]
			if req.String() != "64Mi" || lim.String() != "256Mi" {
				t.Errorf("ephemeral-storage request %s and limit %s, want 64Mi and 256Mi", req.String(), lim.String())
			}
		}, "resources: {limits: {ephemeral-storage: lots}}", "/resources/limits/ephemeral-storage"},
	{"webhook.apiServerCIDRs", "webhook: {apiServerCIDRs: [10.0.0.11/32, \"fd00::11/128\"]}",
		func(t *testing.T, r rendered) {
			const want = "--conversion-webhook-api-server-cidrs=10.0.0.11/32,fd00::11/128"
			args := container(r).Args
			if !slices.Contains(args, want) {
				t.Fatalf("args %v, want %s", args, want)
			}
			// The binary itself must take what the chart renders.
			var o conversion.Options
			fs := flag.NewFlagSet("bar-controller", flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse([]string{want}); err != nil {
				t.Fatal(err)
			}
			if err := o.Complete("bar-controller"); err != nil || len(o.APIServerCIDRs) != 2 {
				t.Errorf("the binary takes %s as %v, %v; want two CIDRs", want, o.APIServerCIDRs, err)
			}
		}, "webhook: {apiServerCIDRs: [10.0.0.11/32, 128.0.0.0/1]}", "/webhook/apiServerCIDRs/1"},
	{"Helm's recommended labels but not on the Pods", "",
		func(t *testing.T, r rendered) {
			if l := r.deployment.Labels; l["app.kubernetes.io/instance"] != "bar-controller" || l["helm.sh/chart"] != "bar-controller-0.1.0" {
				t.Errorf("the Deployment's labels %v, want the release's and the chart's", l)
			}
			if l := r.deployment.Spec.Template.Labels; l["helm.sh/chart"] != "" || l["app.kubernetes.io/version"] != "" {
				t.Errorf("the Pods' labels %v carry the chart's version: a chart upgrade alone would roll them", l)
			}
		}, "commonLabels: {app.kubernetes.io/instance: other}", "/commonLabels/app.kubernetes.io~1instance"},
	{"rbac.aggregateClusterRoles", "rbac: {aggregateClusterRoles: true}",
		func(t *testing.T, r rendered) {
			view, edit := r.objects["ClusterRole/<nil>/bar-controller-view"], r.objects["ClusterRole/<nil>/bar-controller-edit"]
			if view == nil || edit == nil {
				t.Fatal("no bar-controller-view and bar-controller-edit ClusterRoles")
			}
			for role, want := range map[string][]string{"view": {"view", "edit", "admin"}, "edit": {"edit", "admin"}} {
				l := labels(r.objects["ClusterRole/<nil>/bar-controller-"+role])
				for _, to := range want {
					if l["rbac.authorization.k8s.io/aggregate-to-"+to] != "true" {
						t.Errorf("bar-controller-%s does not aggregate to %s: %v", role, to, l)
					}
				}
			}
			if raw := fmt.Sprint(edit["rules"]); strings.Contains(raw, "status") {
				t.Errorf("the edit role writes the status, which is the controller's: %s", raw)
			}
		}, `rbac: {aggregateClusterRoles: "true"}`, "/rbac/aggregateClusterRoles"},
	{"monitoring.serviceMonitor.labels and monitoring.prometheusRule.labels",
		"monitoring: {serviceMonitor: {enabled: true, labels: {release: kps}}, prometheusRule: {enabled: true, labels: {release: kps}}}",
		func(t *testing.T, r rendered) {
			for _, key := range []string{"ServiceMonitor/bar-controller/bar-controller", "PrometheusRule/bar-controller/bar-controller"} {
				if l := labels(r.objects[key]); l["release"] != "kps" || l["app.kubernetes.io/name"] != "bar-controller" {
					t.Errorf("%s: labels %v, want release=kps beside the chart's", key, l)
				}
			}
		}, "monitoring: {serviceMonitor: {enabled: true, labels: {app.kubernetes.io/name: x}}}", "/monitoring/serviceMonitor/labels/app.kubernetes.io~1name"},
	{"monitoring.prometheusRule selectors", "monitoring: {prometheusRule: {enabled: true, selector: 'job=\"bc\"', clusterLabel: cluster}}",
		func(t *testing.T, r rendered) {
			rule := r.objects["PrometheusRule/bar-controller/bar-controller"]
			raw := fmt.Sprint(rule["spec"])
			if strings.Contains(raw, "bar-controller-metrics\"") || !strings.Contains(raw, `sum by (cluster, namespace, job)`) {
				t.Errorf("the rules do not select job=\"bc\" by cluster: %.300s", raw)
			}
		}, "monitoring: {prometheusRule: {enabled: true, selector: job=bc}}", "/monitoring/prometheusRule/selector"},
	{"monitoring.dashboard", "monitoring: {dashboard: {enabled: true, labels: {grafana_dashboard: null, dashboards: bar-controller}}}",
		func(t *testing.T, r rendered) {
			cm := r.objects["ConfigMap/bar-controller/bar-controller-dashboard"]
			if l := labels(cm); l["dashboards"] != "bar-controller" || l["grafana_dashboard"] != nil {
				t.Errorf("the dashboard's labels %v, want the sidecar's dashboards=bar-controller alone", l)
			}
			if data, _ := cm["data"].(map[string]any)["dashboard.json"].(string); !strings.Contains(data, `"name": "cluster"`) {
				t.Error("the ConfigMap holds no dashboard with a cluster variable")
			}
		}, "monitoring: {dashboard: {enabled: true, labels: {app.kubernetes.io/name: x}}}", "/monitoring/dashboard/labels/app.kubernetes.io~1name"},
	{"monitoring.serviceMonitor.prometheusServiceAccount: discovery",
		"monitoring: {serviceMonitor: {enabled: true, prometheusServiceAccount: {name: prometheus-k8s, namespace: monitoring}}}",
		func(t *testing.T, r rendered) {
			role, binding := r.objects["Role/bar-controller/bar-controller-prometheus-discovery"], r.objects["RoleBinding/bar-controller/bar-controller-prometheus-discovery"]
			if role == nil || binding == nil {
				t.Fatal("no discovery Role and RoleBinding for Prometheus's ServiceAccount")
			}
			subject := asList(binding["subjects"])[0].(map[string]any)
			if subject["name"] != "prometheus-k8s" || subject["namespace"] != "monitoring" {
				t.Errorf("the discovery RoleBinding's subject %v", subject)
			}
			for _, rule := range asList(role["rules"]) {
				if slices.ContainsFunc(asList(rule.(map[string]any)["resources"]), func(r any) bool { return r == "secrets" }) {
					t.Errorf("discovery reads Secrets: %v", rule)
				}
			}
		}, "monitoring: {serviceMonitor: {enabled: true, prometheusServiceAccount: {name: prometheus-k8s}}}", "/monitoring/serviceMonitor/prometheusServiceAccount"},
}

// asList is v as a list, or nil.
func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestValues renders each value of the table as documented, and has the
// schema refuse a bad setting of it with an error that names it.
func TestValues(t *testing.T) {
	helm, _ := tools(t)
	for _, tc := range valueCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.check != nil {
				tc.check(t, mustRender(t, helm, tc.values))
			}
			_, err := renderValues(t, helm, tc.bad)
			switch {
			case err == nil:
				t.Errorf("%q rendered, want the schema to refuse it", tc.bad)
			case !strings.Contains(err.Error(), "at '"+tc.wantErr):
				t.Errorf("%q: %v, want an error at %s", tc.bad, err, tc.wantErr)
			}
		})
	}
}
