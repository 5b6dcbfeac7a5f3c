{{/* Names and labels shared by every object of the release. */}}

{{- define "loopguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "loopguard.workers" -}}
{{- printf "%s-worker" (include "loopguard.fullname" .) -}}
{{- end -}}

{{/* A workload's selector labels: (dict "root" $ "component" "worker"|"audit"). */}}
{{- define "loopguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The worker workloads, one StatefulSet, Service, PDB and ServiceMonitor each: by default the
workers of role all; with roles.split the guarding workers (the same `-worker` objects and
selector, KEDA's target, LOOPGUARD_ROLE=guard) and the audit workers (`-audit`,
LOOPGUARD_ROLE=audit: the audit trail, incidents and the status pages).
*/}}
{{- define "loopguard.workloads" -}}
{{- if .Values.roles.split -}}
- {name: {{ include "loopguard.workers" . }}, component: worker, role: guard}
- {name: {{ include "loopguard.fullname" . }}-audit, component: audit, role: audit}
{{- else -}}
- {name: {{ include "loopguard.workers" . }}, component: worker, role: all}
{{- end -}}
{{- end -}}

{{- define "loopguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "loopguard.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "loopguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "loopguard.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret the workers, the migrate Job and KEDA read. */}}
{{- define "loopguard.secretName" -}}
{{- .Values.secret.existingSecret | default (include "loopguard.fullname" .) -}}
{{- end -}}

{{/* The Secret holding the gateway keys file (LOOPGUARD_GATEWAY_KEYS). */}}
{{- define "loopguard.gatewayKeysSecretName" -}}
{{- .Values.gatewayKeys.existingSecret | default (printf "%s-gateway-keys" (include "loopguard.fullname" .)) -}}
{{- end -}}

{{- define "loopguard.sasl" -}}
{{- ne .Values.kafka.saslMechanism "" -}}
{{- end -}}

{{/* kafka://a:9092;kafka://b:9092 from kafka.brokers, as LOOPGUARD_BROKER takes it. */}}
{{- define "loopguard.brokerUrl" -}}
{{- $urls := list -}}
{{- range .Values.kafka.brokers -}}
{{- $urls = append $urls (printf "kafka://%s" .) -}}
{{- end -}}
{{- join ";" $urls -}}
{{- end -}}

{{/* Refuse values that cannot work, with one line each, before anything is applied. */}}
{{- define "loopguard.validate" -}}
{{- if not .Values.kafka.brokers -}}
{{- fail "kafka.brokers: list the bootstrap brokers (host:port)" -}}
{{- end -}}
{{- if lt (int .Values.partitions) 1 -}}
{{- fail "partitions must be at least 1" -}}
{{- end -}}
{{- if not .Values.secret.existingSecret -}}
{{- if not .Values.secret.data.webToken -}}
{{- fail "secret.data.webToken: set a token for the status page (e.g. openssl rand -hex 24), or name your own Secret in secret.existingSecret" -}}
{{- end -}}
{{- if not .Values.secret.data.dbUrl -}}
{{- fail "secret.data.dbUrl: set the audit trail's URL (postgresql+psycopg://user:password@host:5432/db), or name your own Secret in secret.existingSecret" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.gatewayKeys.enabled (not .Values.gatewayKeys.existingSecret) -}}
{{- if not (and (kindIs "map" .Values.gatewayKeys.keys) .Values.gatewayKeys.keys.gateways) -}}
{{- fail "gatewayKeys.keys: give the workers' keys file ({gateways: {<gateway id>: {<key id>: <secret>}}, operators: {...}}), or name your own Secret in gatewayKeys.existingSecret, or set gatewayKeys.enabled=false (no signing: any gateway can touch another's runs)" -}}
{{- end -}}
{{- end -}}
{{- if .Values.autoscaling.enabled -}}
{{- $min := int .Values.autoscaling.minReplicaCount -}}
{{- $max := int .Values.autoscaling.maxReplicaCount -}}
{{- if lt $min 1 -}}
{{- fail "autoscaling.minReplicaCount must be at least 1: the guard never scales to zero" -}}
{{- end -}}
{{- if gt $min $max -}}
{{- fail (printf "autoscaling.minReplicaCount (%d) exceeds maxReplicaCount (%d)" $min $max) -}}
{{- end -}}
{{- if gt $max (int .Values.partitions) -}}
{{- fail (printf "autoscaling.maxReplicaCount (%d) exceeds partitions (%d): a worker beyond the partitions sits idle" $max (int .Values.partitions)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.roles.split -}}
{{- $audit := int .Values.roles.audit.replicaCount -}}
{{- if or (lt $audit 1) (gt $audit (int .Values.partitions)) -}}
{{- fail (printf "roles.audit.replicaCount (%d) must be between 1 and partitions (%d)" $audit (int .Values.partitions)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.staticMembership.enabled -}}
{{- if gt (mulf 3 .Values.staticMembership.heartbeatIntervalSeconds) (float64 .Values.staticMembership.sessionTimeoutSeconds) -}}
{{- fail "staticMembership.heartbeatIntervalSeconds must be at most a third of sessionTimeoutSeconds" -}}
{{- end -}}
{{- end -}}
{{- end -}}
