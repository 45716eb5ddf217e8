{{/* Names and labels. */}}
{{- define "cutover-router.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cutover-router.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cutover-router.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cutover-router.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cutover-router.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "cutover-router.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cutover
{{- end -}}

{{- define "cutover-router.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cutover-router.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cutover-router.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Kafka client settings: the plain ones from .Values.kafka, each secret as a ${file:} reference
to its mounted Secret, and the TLS file locations. A secret value in .Values.kafka stops the
rendering with a sentence: values files are committed and printed, Secrets are not.
*/}}
{{- define "cutover-router.kafka" -}}
{{- $secretSettings := list "sasl.password" "sasl.oauthbearer.client.secret" "ssl.key.password" "ssl.keystore.password" "ssl.key.pem" "ssl.truststore.password" "sasl.jaas.config" -}}
{{- $kafka := dict -}}
{{- range $k, $v := .Values.kafka -}}
{{- if and (has (lower $k) $secretSettings) (not (regexMatch "^\\$\\{(env|file):[^}]+\\}$" (toString $v))) -}}
{{- fail (printf "kafka.%s holds a secret in the chart's values; keep it in a Kubernetes Secret and name it under secrets: (%s: {secretName: NAME, key: KEY})" $k $k) -}}
{{- end -}}
{{- $_ := set $kafka $k $v -}}
{{- end -}}
{{- range $k, $ref := .Values.secrets -}}
{{- if not (and (kindIs "map" $ref) $ref.secretName $ref.key) -}}
{{- fail (printf "secrets.%s must name a Secret and its key: {secretName: NAME, key: KEY}" $k) -}}
{{- end -}}
{{- $_ := set $kafka $k (printf "${file:/etc/cutover/secrets/%s/%s}" $ref.secretName $ref.key) -}}
{{- end -}}
{{- if .Values.tls.caSecret -}}
{{- $_ := set $kafka "ssl.ca.location" (printf "/etc/cutover/tls/ca/%s" .Values.tls.caKey) -}}
{{- end -}}
{{- if .Values.tls.clientSecret -}}
{{- $_ := set $kafka "ssl.certificate.location" "/etc/cutover/tls/client/tls.crt" -}}
{{- $_ := set $kafka "ssl.key.location" "/etc/cutover/tls/client/tls.key" -}}
{{- end -}}
{{- toYaml $kafka -}}
{{- end -}}

{{/* The router settings file: .Values.settings with state_dir, http_port and kafka. */}}
{{- define "cutover-router.settings" -}}
{{- range $k := list "state_dir" "http_port" "kafka" -}}
{{- if hasKey $.Values.settings $k -}}
{{- fail (printf "settings.%s is set by the chart; remove it (the port is httpPort, Kafka client settings go under kafka: and secrets:)" $k) -}}
{{- end -}}
{{- end -}}
{{- $s := deepCopy .Values.settings -}}
{{- $_ := set $s "state_dir" "/var/lib/cutover/state" -}}
{{- $_ := set $s "http_port" (int .Values.httpPort) -}}
{{- $kafka := include "cutover-router.kafka" . | fromYaml -}}
{{- if $kafka -}}
{{- $_ := set $s "kafka" $kafka -}}
{{- end -}}
{{- toYaml $s -}}
{{- end -}}

{{/* Volumes and mounts for the Secrets the settings refer to (Kafka secrets, TLS, plan key). */}}
{{- define "cutover-router.secretVolumes" -}}
{{- $names := list -}}
{{- range $k, $ref := .Values.secrets -}}
{{- $names = append $names $ref.secretName -}}
{{- end -}}
{{- range $name := $names | uniq | sortAlpha }}
- name: {{ printf "secret-%s" $name | trunc 63 | trimSuffix "-" }}
  secret:
    secretName: {{ $name }}
    defaultMode: 0400
{{- end }}
{{- with .Values.tls.caSecret }}
- name: tls-ca
  secret:
    secretName: {{ . }}
{{- end }}
{{- with .Values.tls.clientSecret }}
- name: tls-client
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end }}
{{- with .Values.planSigning.secretName }}
- name: plan-key
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{- define "cutover-router.secretMounts" -}}
{{- $names := list -}}
{{- range $k, $ref := .Values.secrets -}}
{{- $names = append $names $ref.secretName -}}
{{- end -}}
{{- range $name := $names | uniq | sortAlpha }}
- name: {{ printf "secret-%s" $name | trunc 63 | trimSuffix "-" }}
  mountPath: /etc/cutover/secrets/{{ $name }}
  readOnly: true
{{- end }}
{{- if .Values.tls.caSecret }}
- name: tls-ca
  mountPath: /etc/cutover/tls/ca
  readOnly: true
{{- end }}
{{- if .Values.tls.clientSecret }}
- name: tls-client
  mountPath: /etc/cutover/tls/client
  readOnly: true
{{- end }}
{{- if .Values.planSigning.secretName }}
- name: plan-key
  mountPath: /etc/cutover/plan-key
  readOnly: true
{{- end }}
{{- end -}}

{{- define "cutover-router.planKeyEnv" -}}
{{- if .Values.planSigning.secretName }}
- name: CUTOVER_PLAN_KEY_FILE
  value: /etc/cutover/plan-key/{{ .Values.planSigning.key }}
{{- end }}
{{- end -}}
