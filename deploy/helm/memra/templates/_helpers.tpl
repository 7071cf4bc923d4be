{{/* The chart's name, and the release's full name (63 characters at most). */}}
{{- define "memra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "memra.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "memra.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "memra.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the memra pods: the Service, the autoscaler's target and the InferencePool use them. */}}
{{- define "memra.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memra.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: model-server
{{- end -}}

{{- define "memra.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "memra.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "memra.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "memra.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "memra.fullname" .)) .Values.apiKeys.existingSecret -}}
{{- end -}}

{{- define "memra.cacheClaim" -}}
{{- default (printf "%s-cache" (include "memra.fullname" .)) .Values.cache.persistence.existingClaim -}}
{{- end -}}

{{- define "memra.epp" -}}
{{- default (printf "%s-epp" (include "memra.fullname" .) | trunc 63 | trimSuffix "-") .Values.inferencePool.endpointPicker.name -}}
{{- end -}}

{{/* The model argument of serve: NAME=SPEC, or SPEC served under its repository's name. */}}
{{- define "memra.model" -}}
{{- $spec := required "model.spec is required: the hf: spec of the model to serve" .Values.model.spec -}}
{{- if .Values.model.name -}}{{ printf "%s=%s" .Values.model.name $spec }}{{- else -}}{{ $spec }}{{- end -}}
{{- end -}}

{{/* The hub's environment, shared by the pull and the server. */}}
{{- define "memra.hfEnv" -}}
- name: HF_HOME
  value: {{ printf "%s/huggingface" .Values.cache.mountPath | quote }}
- name: XDG_CACHE_HOME
  value: {{ .Values.cache.mountPath | quote }}
- name: HOME
  value: /tmp
{{- with .Values.hf.endpoint }}
- name: HF_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- end -}}
