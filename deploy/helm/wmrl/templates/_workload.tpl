{{/*
The pod template of a consuming stage; call with (dict "root" $ "stage" NAME "args" LIST
"env" LIST "mounts" LIST "volumes" LIST "image" IMAGE). Every stage runs the same binary with
its subcommand, the shared config file and its own credentials.
*/}}
{{- define "wmrl.podTemplate" -}}
{{- $v := index .root.Values.stages .stage }}
metadata:
  labels:
    {{- include "wmrl.stageLabels" . | nindent 4 }}
  annotations:
    checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
spec:
  {{- include "wmrl.podSpecCommon" . | nindent 2 }}
  {{- with .jail }}
  {{- if hasKey . "hostUsers" }}
  hostUsers: {{ .hostUsers }}
  {{- end }}
  {{- end }}
  {{- with $v.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  terminationGracePeriodSeconds: {{ default 45 $v.terminationGracePeriodSeconds }}
  {{- with .restartPolicy }}
  restartPolicy: {{ . }}
  {{- end }}
  containers:
    - name: {{ .stage }}
      image: {{ default (include "wmrl.image" (dict "root" .root "img" .root.Values.image)) .image | quote }}
      imagePullPolicy: {{ .root.Values.image.pullPolicy }}
      args:
        - {{ .stage | quote }}
        - {{ printf "--metrics-addr=:%v" $v.metricsPort | quote }}
        {{- with .args }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- include "wmrl.args" $v.args | nindent 8 }}
      env:
        {{- include "wmrl.env" . | nindent 8 }}
        {{- with .env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: metrics
          containerPort: {{ $v.metricsPort }}
          protocol: TCP
      {{- include "wmrl.probes" . | nindent 6 }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        {{- toYaml (merge (dict) (default (dict) (.jail).securityContext) .root.Values.securityContext) | nindent 8 }}
      volumeMounts:
        {{- include "wmrl.volumeMounts" . | nindent 8 }}
        {{- with .mounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- include "wmrl.volumes" . | nindent 4 }}
    {{- with .volumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The metrics Service of a stage (headless for StatefulSets); the ServiceMonitor selects it. */}}
{{- define "wmrl.service" -}}
{{- $v := index .root.Values.stages .stage }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "wmrl.fullname" .root }}-{{ .stage }}
  labels:
    {{- include "wmrl.stageLabels" . | nindent 4 }}
    wmrl.io/metrics: "true"
spec:
  {{- if .headless }}
  clusterIP: None
  {{- end }}
  selector:
    {{- include "wmrl.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ $v.metricsPort }}
      targetPort: metrics
      protocol: TCP
{{- end }}

{{- define "wmrl.pdb" -}}
{{- $v := index .root.Values.stages .stage }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "wmrl.fullname" .root }}-{{ .stage }}
  labels:
    {{- include "wmrl.stageLabels" . | nindent 4 }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "wmrl.selectorLabels" . | nindent 6 }}
{{- end }}

{{/* The artifact claim-check volume shared by generate, worldmodel and sandbox. */}}
{{- define "wmrl.artifactMounts" -}}
{{- if .Values.artifacts.existingClaim }}
- name: artifacts
  mountPath: {{ .Values.artifacts.mountPath }}
{{- end }}
{{- end }}
{{- define "wmrl.artifactVolumes" -}}
{{- if .Values.artifacts.existingClaim }}
- name: artifacts
  persistentVolumeClaim:
    claimName: {{ .Values.artifacts.existingClaim }}
{{- end }}
{{- end }}
