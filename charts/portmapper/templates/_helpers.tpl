{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "portmapper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "portmapper.fullname" -}}
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

{{- define "portmapper.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "portmapper.labels" -}}
helm.sh/chart: {{ include "portmapper.chart" . }}
{{ include "portmapper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: portmapper
{{- end }}

{{/* Labels the Deployment, Service, PDB and NetworkPolicy select on (never change them). */}}
{{- define "portmapper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "portmapper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "portmapper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "portmapper.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "portmapper.leaseName" -}}
{{- default (include "portmapper.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- define "portmapper.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Cross-field rules JSON schema cannot state: fail the render with a message saying what to change.
*/}}
{{- define "portmapper.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 requires leaderElection.enabled=true: without a Lease every replica would write" }}
{{- end }}
{{- if ge (int .Values.leaderElection.leaseGraceSeconds) (int .Values.leaderElection.leaseDurationSeconds) }}
{{- fail "leaderElection.leaseGraceSeconds must be smaller than leaderElection.leaseDurationSeconds" }}
{{- end }}
{{- end }}

{{/*
The rules the operator needs on the PortMappings and endpoints it manages. Each rule is
exercised by tests/e2e/rbac.rs (request log of an end-to-end run), except
portmappings/finalizers (see the comment there).
*/}}
{{- define "portmapper.managedRules" -}}
# PortMappings: the controller's list/watch; status written by server-side apply; patch only
# for the release finalizer (portmapper.dev/release-gates) of PortMappings that gate pods.
- apiGroups: ["portmapper.dev"]
  resources: ["portmappings"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["portmapper.dev"]
  resources: ["portmappings/status"]
  verbs: ["patch"]
# Our slices and Endpoints carry ownerReferences with blockOwnerDeletion: true; with the
# OwnerReferencesPermissionEnforcement admission plugin that needs update on the owner's finalizers.
- apiGroups: ["portmapper.dev"]
  resources: ["portmappings/finalizers"]
  verbs: ["update"]
# Services and pool pods: read from watches only.
- apiGroups: [""]
  resources: ["services", "pods"]
  verbs: ["list", "watch"]
# The publication readiness gate: the portmapper.dev/published condition of pool pods that
# list it in spec.readinessGates (a strategic merge patch of that one condition; see
# docs/security.md). Scoped like the rest: the watched namespace with watchNamespace.
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# EndpointSlices: watches, a GET of a slice of ours that left the watch, creates and
# resourceVersion-conditional updates of ours, UID-preconditioned deletes (stray slices, native
# leftovers of a selector migration).
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
# Legacy Endpoints (legacyEndpoints: true) and selector migration: same verbs as slices.
- apiGroups: [""]
  resources: ["endpoints"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events: kube's Recorder creates, then aggregates repeats with a PATCH.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
