{{/* Chart name, release-scoped full name and labels (the usual Helm conventions). */}}
{{- define "wmrl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wmrl.fullname" -}}
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

{{- define "wmrl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "wmrl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: wmrl
{{- end }}

{{/* Selector labels of one stage; call with (dict "root" $ "stage" "worldmodel"). */}}
{{- define "wmrl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wmrl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .stage }}
{{- end }}

{{- define "wmrl.stageLabels" -}}
{{ include "wmrl.labels" .root }}
app.kubernetes.io/component: {{ .stage }}
{{- end }}

{{/* Full topic name from its suffix; call with (dict "root" $ "suffix" "rollouts.v1"). */}}
{{- define "wmrl.topic" -}}
{{- printf "%s%s" .root.Values.kafka.topicPrefix .suffix }}
{{- end }}

{{/* The Kafka principal (KafkaUser name) of a stage. */}}
{{- define "wmrl.userName" -}}
{{- printf "%s-%s" (include "wmrl.fullname" .root) .stage | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding a stage's Kafka credentials: Strimzi names it after the KafkaUser. */}}
{{- define "wmrl.credentialsSecret" -}}
{{- $s := index .root.Values.stages .stage | default dict }}
{{- default (include "wmrl.userName" .) $s.credentialsSecret }}
{{- end }}

{{- define "wmrl.image" -}}
{{- $img := .img }}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) }}
{{- end }}

{{/* Rejects combinations the stages cannot run with. */}}
{{- define "wmrl.validate" -}}
{{- $auth := .Values.kafka.authentication }}
{{- if not (has $auth (list "none" "scram-sha-512" "tls")) }}
{{- fail (printf "kafka.authentication %q: want none, scram-sha-512 or tls" $auth) }}
{{- end }}
{{- if and (eq $auth "tls") (not .Values.kafka.tls.enabled) }}
{{- fail "kafka.authentication tls (mutual TLS) needs kafka.tls.enabled: true" }}
{{- end }}
{{- if and .Values.kafka.tls.enabled (not .Values.kafka.tls.caSecret.name) }}
{{- fail "kafka.tls.enabled needs kafka.tls.caSecret.name (Strimzi: <cluster>-cluster-ca-cert)" }}
{{- end }}
{{- if regexMatch "^[a-z]+://[^/@]*:[^/@]*@" .Values.redis.url }}
{{- fail "redis.url holds a password, which would be a pod argument: put it in redis.password or the Secret redis.existingSecret (read from a file, --redis-password-file)" }}
{{- end }}
{{- end }}

{{/*
Environment of every stage container: the shared config file, the pod name (static membership,
transactional id) and where the stage's credentials are. Credentials themselves are files of
Secret volumes, never environment variables (a process of the same uid could read those from
/proc/<pid>/environ) or arguments: wmrl reads the files named by --*-file options at start-up.
*/}}
{{- define "wmrl.env" -}}
- name: WMRL_CONFIG
  value: /etc/wmrl/config/config.yaml
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- $auth := .root.Values.kafka.authentication }}
{{- if eq $auth "scram-sha-512" }}
- name: WMRL_SASL_USER
  value: {{ include "wmrl.userName" . | quote }}
- name: WMRL_SASL_PASSWORD_FILE
  value: /etc/wmrl/kafka-user/password
{{- else if eq $auth "tls" }}
- name: WMRL_TLS_CERT
  value: /etc/wmrl/kafka-user/user.crt
- name: WMRL_TLS_KEY
  value: /etc/wmrl/kafka-user/user.key
{{- end }}
{{- end }}

{{- define "wmrl.volumeMounts" -}}
- name: config
  mountPath: /etc/wmrl/config
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .root.Values.kafka.tls.enabled }}
- name: kafka-ca
  mountPath: /etc/wmrl/kafka-ca
  readOnly: true
{{- end }}
{{- if ne .root.Values.kafka.authentication "none" }}
- name: kafka-user
  mountPath: /etc/wmrl/kafka-user
  readOnly: true
{{- end }}
{{- end }}

{{/* Credential files are readable by the pod's group (fsGroup) only, not by other users, such
as a sandbox job running under a uid of its own. */}}
{{- define "wmrl.volumes" -}}
- name: config
  configMap:
    name: {{ include "wmrl.fullname" .root }}-config
- name: tmp
  emptyDir: {}
{{- if .root.Values.kafka.tls.enabled }}
- name: kafka-ca
  secret:
    secretName: {{ .root.Values.kafka.tls.caSecret.name }}
    defaultMode: 288  # 0440
    items:
      - key: {{ .root.Values.kafka.tls.caSecret.key }}
        path: ca.crt
{{- end }}
{{- if eq .root.Values.kafka.authentication "scram-sha-512" }}
- name: kafka-user
  secret:
    secretName: {{ include "wmrl.credentialsSecret" . }}
    defaultMode: 288  # 0440
    items:
      - key: password
        path: password
{{- else if eq .root.Values.kafka.authentication "tls" }}
- name: kafka-user
  secret:
    secretName: {{ include "wmrl.credentialsSecret" . }}
    defaultMode: 288  # 0440
    items:
      - key: user.crt
        path: user.crt
      - key: user.key
        path: user.key
{{- end }}
{{- end }}

{{/* A credential mounted as a file, <dir>/<file>: the volume and its mount; call with (dict
"name" VOLUME "secret" SECRET "key" KEY "dir" DIR "file" FILE). */}}
{{- define "wmrl.secretFileVolume" -}}
- name: {{ .name }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 288  # 0440
    items:
      - key: {{ .key }}
        path: {{ .file }}
{{- end }}
{{- define "wmrl.secretFileMount" -}}
- name: {{ .name }}
  mountPath: {{ .dir }}
  readOnly: true
{{- end }}

{{- define "wmrl.args" -}}
{{- range $k, $v := . }}
- {{ printf "--%s=%v" $k $v | quote }}
{{- end }}
{{- end }}

{{/* Liveness on /healthz (the process serves), readiness on /readyz (it has its cluster and its
assignment; correct also its state). Both exist from issue 13 on. */}}
{{- define "wmrl.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 6
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
  failureThreshold: 3
{{- end }}

{{- define "wmrl.podSpecCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml (merge (dict) (default (dict) (.jail).podSecurityContext) .root.Values.podSecurityContext) | nindent 2 }}
automountServiceAccountToken: false
{{- end }}
