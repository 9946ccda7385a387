{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "vllm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, unless it already contains the chart name. */}}
{{- define "vllm-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "vllm-operator.probeName" -}}
{{- printf "%s-probe" (include "vllm-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vllm-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "vllm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vllm-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "vllm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "vllm-operator.probeSelectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gpu-probe
{{- end }}

{{- define "vllm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vllm-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "vllm-operator.probeServiceAccountName" -}}
{{- if .Values.probe.serviceAccount.create }}
{{- default (include "vllm-operator.probeName" .) .Values.probe.serviceAccount.name }}
{{- else }}
{{- required "probe.serviceAccount.name is required when probe.serviceAccount.create=false" .Values.probe.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: a digest wins over a tag; the tag defaults to the chart's appVersion. */}}
{{- define "vllm-operator.image" -}}
{{- $img := .image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end }}

{{/* The RBAC rules the operator's code calls: files/rbac-rules.yaml, the single source. */}}
{{- define "vllm-operator.rbacRules" -}}
{{- .Files.Get "files/rbac-rules.yaml" -}}
{{- end }}

{{/*
Refuse Kubernetes < 1.27, but only on a live install/upgrade. Offline renders (`helm template`,
`helm lint`, GitOps tools without cluster access) get Helm's default version (v1.20) and `lookup`
returns nothing there, so they render; against a cluster the kube-system Namespace exists and the
real version is checked.
*/}}
{{- define "vllm-operator.checkKubeVersion" -}}
{{- if and (semverCompare "<1.27-0" .Capabilities.KubeVersion.Version) (lookup "v1" "Namespace" "" "kube-system") }}
{{- fail (printf "vllm-operator needs Kubernetes >= 1.27; this cluster runs %s" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}

{{/* The admission webhook's Service name and the DNS name the API server calls. */}}
{{- define "vllm-operator.webhookService" -}}
{{- printf "%s-webhook" (include "vllm-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
