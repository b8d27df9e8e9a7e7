{{/*
Names. fullname is the StatefulSet, the client Service and the prefix of
everything else; it is cut to 40 characters so that "<fullname>-headless"
and the pod names stay within DNS label limits.
*/}}
{{- define "trustplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "trustplane.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trustplane.headless" -}}
{{- printf "%s-headless" (include "trustplane.fullname" .) }}
{{- end }}

{{- define "trustplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trustplane.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret the nodes mount as --ca-dir. */}}
{{- define "trustplane.caSecret" -}}
{{- default (printf "%s-ca" (include "trustplane.fullname" .)) .Values.existingSecret }}
{{- end }}

{{- define "trustplane.certsInitName" -}}
{{- printf "%s-certs-init" (include "trustplane.fullname" .) }}
{{- end }}

{{- define "trustplane.replicaName" -}}
{{- printf "%s-replica" (include "trustplane.fullname" .) }}
{{- end }}

{{/* replicaLabels mark the read replicas' pods, on top of the selector labels. */}}
{{- define "trustplane.replicaLabels" -}}
app.kubernetes.io/component: read-replica
{{- end }}

{{- define "trustplane.clusterConfigMap" -}}
{{- printf "%s-cluster" (include "trustplane.fullname" .) }}
{{- end }}

{{- define "trustplane.authenticationConfigMap" -}}
{{ include "trustplane.fullname" . }}-authentication
{{- end }}

{{/*
trustplane.authentication is true when the values configure
--authentication-config: public discovery or federated issuers.
*/}}
{{- define "trustplane.authentication" -}}
{{- if or .Values.config.authentication.publicDiscovery .Values.config.authentication.jwt }}true{{ end -}}
{{- end }}

{{- define "trustplane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trustplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trustplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trustplane.labels" -}}
helm.sh/chart: {{ include "trustplane.chart" . }}
{{ include "trustplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
certsInitLabels label the certs-init hook's objects and its pod. They must
not match trustplane.selectorLabels: the StatefulSet, the Services, the
PodDisruptionBudget and the NetworkPolicy's peers select by those, and a
hook pod among them would be a Service endpoint, reach the Raft and gossip
ports, and block drains (the disruption controller cannot handle a pod
owned by a Job it selects).
*/}}
{{- define "trustplane.certsInitLabels" -}}
helm.sh/chart: {{ include "trustplane.chart" . }}
app.kubernetes.io/name: {{ include "trustplane.name" . }}-certs-init
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: certs-init
app.kubernetes.io/part-of: {{ include "trustplane.name" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "trustplane.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
validate fails rendering on values the cluster cannot run with.
*/}}
{{- define "trustplane.validate" -}}
{{- $r := toString .Values.replicas }}
{{- if not (or (eq $r "3") (eq $r "5")) }}
{{- fail (printf "replicas must be 3 or 5 (a Raft cluster of 3 survives one failed node, of 5 two; an even count adds no tolerance and 1 has none); got %s" $r) }}
{{- end }}
{{- $rr := toString .Values.readReplicas }}
{{- if not (regexMatch "^[0-9]+$" $rr) }}
{{- fail (printf "readReplicas must be a whole number (0: none); got %s" $rr) }}
{{- end }}
{{- if not (has .Values.config.executeWrites (list "leader" "local")) }}
{{- fail (printf "config.executeWrites must be \"leader\" or \"local\"; got %q" (toString .Values.config.executeWrites)) }}
{{- end }}
{{- if not (has .Values.podAntiAffinity (list "preferred" "required")) }}
{{- fail (printf "podAntiAffinity must be \"preferred\" or \"required\"; got %q" (toString .Values.podAntiAffinity)) }}
{{- end }}
{{- end }}

{{/* The DNS domain of the headless Service, under which every pod has a name. */}}
{{- define "trustplane.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "trustplane.headless" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/*
join: every pod's gossip address by its stable DNS name, comma-separated
(the --join seeds). A node skips itself.
*/}}
{{- define "trustplane.join" -}}
{{- $full := include "trustplane.fullname" . }}
{{- $domain := include "trustplane.podDomain" . }}
{{- $seeds := list }}
{{- range $i := until (int .Values.replicas) }}
{{- $seeds = append $seeds (printf "%s-%d.%s:%d" $full $i $domain (int $.Values.ports.gossip)) }}
{{- end }}
{{- join "," $seeds }}
{{- end }}

{{/*
tlsSANs: the names clients reach a node by. $(TRUSTPLANE_NODE_NAME) is
expanded by the kubelet from the variable defined before it.
*/}}
{{- define "trustplane.tlsSANs" -}}
{{- $full := include "trustplane.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $sans := list $full (printf "%s.%s" $full $ns) (printf "%s.%s.svc" $full $ns) (printf "%s.%s.svc.%s" $full $ns .Values.clusterDomain) }}
{{- $sans = append $sans (printf "$(TRUSTPLANE_NODE_NAME).%s" (include "trustplane.podDomain" .)) }}
{{- $sans = append $sans (printf "$(TRUSTPLANE_NODE_NAME).%s.%s.svc" (include "trustplane.headless" .) $ns) }}
{{- range .Values.config.extraTLSSANs }}
{{- $sans = append $sans . }}
{{- end }}
{{- join "," $sans }}
{{- end }}
