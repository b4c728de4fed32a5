{{/*
Helpers shared by every template of the ascend-llm-operator chart.
Names follow Helm's conventions (63-character limit of DNS labels); labels are the
Kubernetes recommended app.kubernetes.io/* set.
*/}}

{{/*
ascend-llm-operator.name: the chart's name, or .Values.nameOverride; at most 63 characters.
*/}}
{{- define "ascend-llm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
ascend-llm-operator.fullname: the prefix of every object's name.
.Values.fullnameOverride wins; a release whose name already contains the chart name is used
as it is (no "ascend-llm-operator-ascend-llm-operator"); otherwise "<release>-<name>".
*/}}
{{- define "ascend-llm-operator.fullname" -}}
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

{{/*
ascend-llm-operator.clusterScopedName: the name of the release's cluster-scoped objects
(ClusterRole, ClusterRoleBinding): the fullname and the release namespace, so that releases of
the same name in different namespaces (one operator per team, each watching its namespaces) do
not claim the same object. Such names may be up to 253 characters.
*/}}
{{- define "ascend-llm-operator.clusterScopedName" -}}
{{- printf "%s-%s" (include "ascend-llm-operator.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
ascend-llm-operator.chart: "<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "ascend-llm-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
ascend-llm-operator.selectorLabels: the labels that select the operator's pods. Never add
helm.sh/chart or the version here: a Deployment's selector is immutable, so a label that changes
on upgrade would break `helm upgrade`.
*/}}
{{- define "ascend-llm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ascend-llm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
ascend-llm-operator.labels: the full recommended label set for every object of the release
(selector labels + chart, version, managed-by, part-of) and .Values.commonLabels.
*/}}
{{- define "ascend-llm-operator.labels" -}}
helm.sh/chart: {{ include "ascend-llm-operator.chart" . }}
{{ include "ascend-llm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ascend-llm
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
ascend-llm-operator.serviceAccountName: the ServiceAccount the operator runs as: the chart's
own when serviceAccount.create, else serviceAccount.name (which must then exist), else "default".
*/}}
{{- define "ascend-llm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ascend-llm-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
ascend-llm-operator.image: "<repository>:<tag>" or "<repository>@<digest>" for the operator;
the tag defaults to the chart's appVersion.
*/}}
{{- define "ascend-llm-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
ascend-llm-operator.replicas: 1 unless HA is on, then ha.replicas. A single replica runs
--standalone; several replicas elect a leader with the Lease below, and only it reconciles.
*/}}
{{- define "ascend-llm-operator.replicas" -}}
{{- if .Values.ha.enabled }}{{ .Values.ha.replicas }}{{ else }}1{{ end }}
{{- end }}

{{/*
ascend-llm-operator.leaseName: the coordination.k8s.io Lease the HA replicas elect a leader with
(in the release namespace; templates/lease.yaml).
*/}}
{{- define "ascend-llm-operator.leaseName" -}}
{{- default (include "ascend-llm-operator.fullname" .) .Values.ha.leaseName }}
{{- end }}

{{/*
ascend-llm-operator.clusterWide: "true" when the operator watches every namespace (then its
RBAC is a ClusterRole), "" when it watches only .Values.watchNamespaces (a Role in each).
Use as: {{ if include "ascend-llm-operator.clusterWide" . }}
*/}}
{{- define "ascend-llm-operator.clusterWide" -}}
{{- if not .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
ascend-llm-operator.rules: renders a list of RBAC rules from values (each an object with
apiGroups, resources, verbs and a comment) as a YAML list, the comment kept above its rule so
framework and application rules stay readable in the rendered Role.
Call with (list "<heading>" $rules).
*/}}
{{- define "ascend-llm-operator.rules" -}}
{{- $heading := index . 0 }}
{{- range $rule := index . 1 }}
# {{ $heading }}: {{ $rule.comment }}
- apiGroups: {{ toJson $rule.apiGroups }}
  resources: {{ toJson $rule.resources }}
  verbs: {{ toJson $rule.verbs }}
{{- end }}
{{- end }}
