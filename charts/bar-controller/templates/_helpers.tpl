{{/*
The labels every object carries, as artifacts/install's do: the chart adds
none of its own, so that its objects and kustomize's are the same and a
move from one install to the other relabels nothing.
*/}}
{{- define "bar-controller.labels" -}}
app.kubernetes.io/name: bar-controller
{{- end }}

{{/* The image: by digest when one is given, else by tag. */}}
{{- define "bar-controller.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/*
The name of a cluster-scoped binding: namespace-scoped installs suffix it
with their namespace, as artifacts/namespaced does, so that installs in
two namespaces do not overwrite each other's binding.
*/}}
{{- define "bar-controller.clusterName" -}}
{{- if .root.Values.namespaceScoped -}}
{{ .name }}.{{ .root.Release.Namespace }}
{{- else -}}
{{ .name }}
{{- end -}}
{{- end }}

{{/* The controller's ServiceAccount as a binding's subject. */}}
{{- define "bar-controller.subject" -}}
subjects:
- kind: ServiceAccount
  name: bar-controller
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
