{{/*
The labels every object carries, as artifacts/install's do: the chart adds
none of its own, so that its objects and kustomize's are the same and a
move from one install to the other relabels nothing.
*/}}
{{- define "bar-controller.labels" -}}
app.kubernetes.io/name: bar-controller
{{- end }}

{{/*
The labels of every object's metadata: the chart's, the ones Helm's
conventions recommend (the release, the version, the manager, the chart:
which release an object is of, for kubectl get -l and for tools that group
by them), then commonLabels (the schema refuses all of these keys there).
Selectors use bar-controller.labels alone, as they cannot change after
install, and the Pods bar-controller.podMetaLabels, without these: a new
chart version alone would otherwise roll the replicas.
*/}}
{{- define "bar-controller.podMetaLabels" -}}
{{ include "bar-controller.labels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "bar-controller.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{- define "bar-controller.metaLabels" -}}
{{ include "bar-controller.labels" . }}
{{ include "bar-controller.helmLabels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The image: by digest when one is given, else by tag. image.registry
replaces the repository's registry, its first part when that names a host
as Docker's reference grammar has it (a dot, a colon, or localhost), or
goes in front of a repository without one.
*/}}
{{- define "bar-controller.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.image.registry -}}
{{- $parts := splitn "/" 2 $repo -}}
{{- if and $parts._1 (or (contains "." $parts._0) (contains ":" $parts._0) (eq $parts._0 "localhost")) -}}
{{- $repo = $parts._1 -}}
{{- end -}}
{{- $repo = printf "%s/%s" . $repo -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{ $repo }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repo }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/*
The ServiceAccount the controller runs as. dig: a release upgraded with
--reuse-values keeps the values of a chart that had no serviceAccount.
*/}}
{{- define "bar-controller.serviceAccountName" -}}
{{- dig "name" "" (.Values.serviceAccount | default dict) | default "bar-controller" -}}
{{- end }}

{{/*
The release's name with the chart's in it: bar-controller for a release
named so (as the README installs it, and as artifacts/ names everything),
<release>-bar-controller otherwise.
*/}}
{{- define "bar-controller.fullname" -}}
{{- if contains "bar-controller" .Release.Name -}}
{{ .Release.Name }}
{{- else -}}
{{ .Release.Name }}-bar-controller
{{- end -}}
{{- end }}

{{/*
The name of a cluster-scoped object, the fullname and then .name (none
for the fullname alone): every ClusterRole and ClusterRoleBinding the
release owns is its own, so that two releases never share one, and
uninstalling one never deletes the other's (issue 42). Namespace-scoped
installs, which may share a release name across namespaces, suffix it with
their namespace, as artifacts/namespaced does. The release named
bar-controller keeps artifacts/install's names.
*/}}
{{- define "bar-controller.clusterName" -}}
{{- $name := include "bar-controller.fullname" .root -}}
{{- with .name }}{{ $name = printf "%s-%s" $name . }}{{ end -}}
{{- if .root.Values.namespaceScoped -}}
{{ $name }}.{{ .root.Release.Namespace }}
{{- else -}}
{{ $name }}
{{- end -}}
{{- end }}

{{/*
The metrics Service's port name, which the ServiceMonitor scrapes by: it
says the scheme, as Prometheus's and Istio's conventions read it.
*/}}
{{- define "bar-controller.metricsPortName" -}}
{{ if .Values.metrics.secure }}https-metrics{{ else }}http-metrics{{ end }}
{{- end }}

{{/* The controller's ServiceAccount as a binding's subject. */}}
{{- define "bar-controller.subject" -}}
subjects:
- kind: ServiceAccount
  name: {{ include "bar-controller.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
Whether this release serves the CRD's conversion webhook: "true" or empty.
Never with namespaceScoped: the webhook's certificate keeper patches the
CRD, which every namespace shares, and a tenant who may create Pods in
the release's namespace could run as its ServiceAccount. The cluster's
admin serves conversion (artifacts/conversion-webhook, docs/security.md).
*/}}
{{- define "bar-controller.webhook" -}}
{{- if and .Values.webhook.enabled (not .Values.namespaceScoped) -}}
true
{{- end -}}
{{- end }}
