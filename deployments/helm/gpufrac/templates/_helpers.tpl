{{/* The prefix of every object name: the release name when it says gpufrac already. */}}
{{- define "gpufrac.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride -}}
{{- else if contains "gpufrac" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gpufrac" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpufrac.labels" -}}
app.kubernetes.io/name: gpufrac
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpufrac.pluginSelector" -}}
app.kubernetes.io/name: gpufrac
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: kubelet-plugin
{{- end -}}

{{- define "gpufrac.controllerSelector" -}}
app.kubernetes.io/name: gpufrac
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "gpufrac.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "gpufrac.pluginName" -}}{{ include "gpufrac.fullname" . }}-kubelet-plugin{{- end -}}
{{- define "gpufrac.controllerName" -}}{{ include "gpufrac.fullname" . }}-controller{{- end -}}
{{- define "gpufrac.webhookService" -}}{{ include "gpufrac.fullname" . }}-webhook{{- end -}}

{{/* Host paths of the kubelet plugin; the plugin reports its DRA socket to
the kubelet by path, so the container sees them at the same paths. */}}
{{- define "gpufrac.pluginDataDir" -}}{{ .Values.kubeletPlugin.kubeletDir }}/plugins/gpufrac.dev{{- end -}}
{{- define "gpufrac.registrarDir" -}}{{ .Values.kubeletPlugin.kubeletDir }}/plugins_registry{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT from kubernetesAPI, overriding the kubelet's. */}}
{{- define "gpufrac.kubernetesAPIEnv" -}}
{{- with .Values.kubernetesAPI.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kubernetesAPI.port }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ . | toString | quote }}
{{- end }}
{{- end -}}

{{/* "true" when the packing MutatingAdmissionPolicy is installed:
controller.packing.admissionPolicy true, or auto and the cluster serves
admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36
and later). */}}
{{- define "gpufrac.packingPolicy" -}}
{{- $p := .Values.controller.packing -}}
{{- if $p.enabled -}}
{{- if eq (toString $p.admissionPolicy) "auto" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}true{{ end -}}
{{- else if $p.admissionPolicy -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "gpufrac.packingName" -}}{{ include "gpufrac.fullname" . }}-packing{{- end -}}
