{{/*
ascend-llm-operator.settingsEnv: the operator's settings (ascend_operator.settings.OperatorSettings)
as ASCEND_LLM_OPERATOR_* environment variables, one per key of .Values.settings:
key engineRunAsUser -> ASCEND_LLM_OPERATOR_ENGINE_RUN_AS_USER. Scalars are passed as strings,
lists and maps as JSON (pydantic-settings parses complex fields from JSON). A key left null is
not passed, so the operator's own default applies. values.schema.json allows only the keys that
OperatorSettings defines (tests/chart/test_chart.py keeps the two in step).
The scope and leader election come from the chart's own structure, not from .Values.settings:
NAMESPACES from watchNamespaces (JSON list; empty = the whole cluster), STANDALONE, LEASE_NAME and
LEASE_NAMESPACE from ha and the release, so the operator and the command line never disagree.
*/}}
{{- define "ascend-llm-operator.settingsEnv" -}}
- name: ASCEND_LLM_OPERATOR_NAMESPACES
  value: {{ toJson .Values.watchNamespaces | quote }}
- name: ASCEND_LLM_OPERATOR_STANDALONE
  value: {{ (not .Values.ha.enabled) | toString | quote }}
- name: ASCEND_LLM_OPERATOR_LEASE_NAME
  value: {{ include "ascend-llm-operator.leaseName" . | quote }}
- name: ASCEND_LLM_OPERATOR_LEASE_NAMESPACE
  value: {{ .Release.Namespace | quote }}
{{- if kindIs "invalid" .Values.settings.fetchImage }}
{{- /* Only the operator's own image writes to model caches (never a resource's spec.image). */}}
- name: ASCEND_LLM_OPERATOR_FETCH_IMAGE
  value: {{ include "ascend-llm-operator.image" . | quote }}
{{- end }}
{{- range $key, $value := .Values.settings }}
{{- if not (kindIs "invalid" $value) }}
- name: ASCEND_LLM_OPERATOR_{{ $key | snakecase | upper }}
  value: {{ if or (kindIs "slice" $value) (kindIs "map" $value) }}{{ toJson $value | quote }}{{ else }}{{ toString $value | quote }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
