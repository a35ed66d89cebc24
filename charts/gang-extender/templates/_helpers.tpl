{{/*
Labels on every object the chart renders: deploy/'s own (app.kubernetes.io/name
and component stay in each template, as in deploy/), deploy/kustomization.yaml's
part-of, and Helm's usual ones. Selectors and pod templates get none of these,
exactly as in deploy/ (kustomize's `labels` leaves them alone).
*/}}
{{- define "gang-extender.labels" -}}
app.kubernetes.io/part-of: gang-extender
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gang-extender.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The Settings a values key sets (extender/config.py, docs/deploy.md#configuration),
as GANG_* env vars: settings.bindBarrierTimeoutSeconds -> GANG_BIND_BARRIER_TIMEOUT_SECONDS.
Unset (null) keys are left out: the service's default applies. Lists and maps
(tlsHosts) are JSON, as the service reads them. leaderElect and tlsDir are flags
(as in deploy/), leaseNamespace is the pod's namespace unless set, and with
tls.certManager extenderClientCa defaults to that CA's ca.crt: see the
Deployment template.
*/}}
{{- define "gang-extender.settingsEnv" -}}
{{- range $key, $value := .Values.settings }}
{{- $certManagerCa := and $.Values.tls.certManager.enabled (eq $key "extenderClientCa") }}
{{- if and (not (kindIs "invalid" $value)) (not (has $key (list "leaderElect" "tlsDir" "leaseNamespace"))) (not $certManagerCa) }}
- name: GANG_{{ $key | snakecase | upper }}
  value: {{ include "gang-extender.settingValue" $value | quote }}
{{- end }}
{{- end }}
{{- if and (kindIs "invalid" .Values.settings.tlsHosts) (ne .Release.Namespace "gang-system") }}
{{- /* The service's default names cover Service gang-extender in gang-system only. */}}
- name: GANG_TLS_HOSTS
  value: {{ list "localhost" "127.0.0.1" (printf "gang-extender.%s.svc" .Release.Namespace) (printf "gang-extender.%s.svc.cluster.local" .Release.Namespace) | toJson | quote }}
{{- end }}
{{- end -}}

{{- define "gang-extender.settingValue" -}}
{{- if or (kindIs "slice" .) (kindIs "map" .) -}}
{{ toJson . }}
{{- else if and (kindIs "float64" .) (eq . (floor .)) -}}
{{ int64 . }}
{{- else -}}
{{ . }}
{{- end -}}
{{- end -}}

{{/*
The MutatingWebhookConfiguration's name: settings.webhookConfigName, or the
service's default. The object, the name the service patches (its caBundle and
path) and ClusterRole gang-extender's resourceNames all follow it. "" (the
service leaves the configuration alone): the object keeps the default name and
the ClusterRole grants nothing on it.
*/}}
{{- define "gang-extender.webhookConfigName" -}}
{{- $name := .Values.settings.webhookConfigName -}}
{{- if kindIs "invalid" $name }}gang-extender{{ else if eq (toString $name) "" }}gang-extender{{ else }}{{ $name }}{{ end -}}
{{- end -}}
