{{/* The labels of every object: deploy/'s, and Helm's own. */}}
{{- define "sidecar-injector.labels" -}}
app.kubernetes.io/name: sidecar-injector
app.kubernetes.io/part-of: sidecar-injector
{{ include "sidecar-injector.helmLabels" . }}
{{- end }}

{{/* Helm's own labels: which release of which chart made the object. */}}
{{- define "sidecar-injector.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The serving certificate's DNS name, the Service's in the release namespace. */}}
{{- define "sidecar-injector.service" -}}
sidecar-injector.{{ .Release.Namespace }}.svc
{{- end }}
