{{/*
podTemplate is the pod template of both StatefulSets: the voters' and,
with readReplicas, the read replicas'. Its argument is a dict: root (the
chart's context) and replica (bool). A replica differs only in its role
(--role replica, no bootstrap), its component label and whom it spreads
away from; everything else, the seeds included, is the voters'.
*/}}
{{- define "trustplane.podTemplate" -}}
{{- $root := .root }}
{{- $replica := .replica -}}
metadata:
  labels:
    {{- include "trustplane.selectorLabels" $root | nindent 4 }}
    {{- if $replica }}
    {{- include "trustplane.replicaLabels" $root | nindent 4 }}
    {{- end }}
    {{- with $root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A node reads the anonymous section of --authentication-config
    # once: turning public discovery on or off restarts the pods.
    checksum/public-discovery: {{ $root.Values.config.authentication.publicDiscovery | toString | sha256sum | trunc 16 }}
    {{- with $root.Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "trustplane.serviceAccountName" $root }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
  {{- with $root.Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  affinity:
    podAntiAffinity:
      {{- if eq $root.Values.podAntiAffinity "required" }}
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: {{ $root.Values.podAntiAffinityTopologyKey }}
          labelSelector:
            matchLabels:
              {{- include "trustplane.selectorLabels" $root | nindent 14 }}
              {{- if $replica }}
              {{- include "trustplane.replicaLabels" $root | nindent 14 }}
              {{- end }}
            {{- if not $replica }}
            # Voters spread among voters: a read replica beside a voter
            # takes nothing the voter's quorum needs.
            matchExpressions:
              - key: app.kubernetes.io/component
                operator: NotIn
                values: [read-replica]
            {{- end }}
      {{- else }}
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: {{ $root.Values.podAntiAffinityTopologyKey }}
            labelSelector:
              matchLabels:
                {{- include "trustplane.selectorLabels" $root | nindent 16 }}
                {{- if $replica }}
                {{- include "trustplane.replicaLabels" $root | nindent 16 }}
                {{- end }}
              {{- if not $replica }}
              # Voters spread among voters: a read replica beside a voter
              # takes nothing the voter's quorum needs.
              matchExpressions:
                - key: app.kubernetes.io/component
                  operator: NotIn
                  values: [read-replica]
              {{- end }}
      {{- end }}
  {{- with $root.Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: trustplane
      image: {{ include "trustplane.image" $root | quote }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command: ["/trustplane"]
      args: ["serve"]
      # Every setting is a serve flag's TRUSTPLANE_* twin: the image has
      # no shell to build a command line with.
      env:
        - name: TRUSTPLANE_NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: TRUSTPLANE_ADVERTISE_ADDRESS
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        - name: TRUSTPLANE_DATA_DIR
          value: /var/lib/trustplane/data
        - name: TRUSTPLANE_CA_DIR
          value: /etc/trustplane/ca
        - name: TRUSTPLANE_LISTEN
          value: "0.0.0.0:{{ $root.Values.ports.api }}"
        - name: TRUSTPLANE_RAFT_ADDR
          value: "0.0.0.0:{{ $root.Values.ports.raft }}"
        - name: TRUSTPLANE_GOSSIP_ADDR
          value: "0.0.0.0:{{ $root.Values.ports.gossip }}"
        # Raft addresses are the pods' stable DNS names: a pod's IP
        # changes when it is recreated, its Raft address must not.
        - name: TRUSTPLANE_RAFT_ADVERTISE_ADDR
          value: "$(TRUSTPLANE_NODE_NAME).{{ include "trustplane.podDomain" $root }}:{{ $root.Values.ports.raft }}"
        # bootstrap-expect and the seeds follow replicas; they are read
        # from a ConfigMap so that a scale never changes the pod template
        # (which would restart every running node).
        {{- if $replica }}
        # A read replica joins the voters through the same seeds and
        # never bootstraps (--role replica).
        - name: TRUSTPLANE_ROLE
          value: replica
        - name: TRUSTPLANE_BOOTSTRAP_EXPECT
          value: "0"
        {{- else }}
        - name: TRUSTPLANE_BOOTSTRAP_EXPECT
          valueFrom:
            configMapKeyRef:
              name: {{ include "trustplane.clusterConfigMap" $root }}
              key: bootstrap-expect
        {{- end }}
        - name: TRUSTPLANE_JOIN
          valueFrom:
            configMapKeyRef:
              name: {{ include "trustplane.clusterConfigMap" $root }}
              key: join
        - name: TRUSTPLANE_TLS_SAN
          value: {{ include "trustplane.tlsSANs" $root | quote }}
        # A stopped node stays a voter and rejoins as itself: rolling
        # restarts never shrink the Raft configuration.
        - name: TRUSTPLANE_LEAVE_ON_TERMINATE
          value: "false"
        - name: TRUSTPLANE_DEAD_SERVER_TIMEOUT
          value: {{ $root.Values.config.deadServerTimeout | quote }}
        - name: TRUSTPLANE_MAX_STALE_READ
          value: {{ $root.Values.config.maxStaleRead | quote }}
        - name: TRUSTPLANE_EXECUTE_WRITES
          value: {{ $root.Values.config.executeWrites | quote }}
        - name: TRUSTPLANE_LOG_LEVEL
          value: {{ $root.Values.config.logLevel | quote }}
        - name: TRUSTPLANE_CLUSTER_SIGNING_DURATION
          value: {{ $root.Values.config.clusterSigningDuration | quote }}
        {{- with $root.Values.config.admissionWebhookMaxResponseBytes }}
        - name: TRUSTPLANE_ADMISSION_WEBHOOK_MAX_RESPONSE_BYTES
          value: {{ . | quote }}
        {{- end }}
        {{- with $root.Values.config.runtimeConfig }}
        - name: TRUSTPLANE_RUNTIME_CONFIG
          value: {{ . | quote }}
        {{- end }}
        {{- with $root.Values.config.featureGates }}
        - name: TRUSTPLANE_FEATURE_GATES
          value: {{ . | quote }}
        {{- end }}
        {{- with $root.Values.config.serviceAccountIssuer }}
        - name: TRUSTPLANE_SERVICE_ACCOUNT_ISSUER
          value: {{ . | quote }}
        {{- end }}
        {{- with $root.Values.config.serviceAccountJWKSURI }}
        - name: TRUSTPLANE_SERVICE_ACCOUNT_JWKS_URI
          value: {{ . | quote }}
        {{- end }}
        {{- if include "trustplane.authentication" $root }}
        - name: TRUSTPLANE_AUTHENTICATION_CONFIG
          value: /etc/trustplane/authentication/authentication-config.yaml
        {{- end }}
        {{- if $root.Values.config.encryptionProviderConfig.secretName }}
        - name: TRUSTPLANE_ENCRYPTION_PROVIDER_CONFIG
          value: "/etc/trustplane/encryption/{{ $root.Values.config.encryptionProviderConfig.key }}"
        {{- end }}
        {{- with $root.Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: api
          containerPort: {{ $root.Values.ports.api }}
          protocol: TCP
        - name: raft
          containerPort: {{ $root.Values.ports.raft }}
          protocol: TCP
        - name: gossip-tcp
          containerPort: {{ $root.Values.ports.gossip }}
          protocol: TCP
        - name: gossip-udp
          containerPort: {{ $root.Values.ports.gossip }}
          protocol: UDP
      # /livez, /readyz and /healthz answer without credentials.
      # Startup: the API is up (a node may wait for its peers before
      # Raft has a leader). Liveness: the process and Raft run; it never
      # depends on the other nodes, so a lost quorum restarts nothing.
      # Readiness: a member of the Raft configuration with a leader,
      # caught up and bootstrapped; the Services route only to those.
      startupProbe:
        httpGet:
          path: /livez
          port: api
          scheme: HTTPS
        periodSeconds: {{ $root.Values.probes.startup.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.startup.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.startup.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /livez
          port: api
          scheme: HTTPS
        periodSeconds: {{ $root.Values.probes.liveness.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.liveness.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.liveness.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: api
          scheme: HTTPS
        periodSeconds: {{ $root.Values.probes.readiness.periodSeconds }}
        timeoutSeconds: {{ $root.Values.probes.readiness.timeoutSeconds }}
        failureThreshold: {{ $root.Values.probes.readiness.failureThreshold }}
      resources:
        {{- toYaml $root.Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.containerSecurityContext | nindent 8 }}
      volumeMounts:
        # The data directory is a subdirectory of the volume: the node
        # makes it 0700 and owns it, which it cannot do to a volume's
        # root (owned by root, group fsGroup).
        - name: data
          mountPath: /var/lib/trustplane
        - name: ca
          mountPath: /etc/trustplane/ca
          readOnly: true
        {{- if $root.Values.config.encryptionProviderConfig.secretName }}
        - name: encryption
          mountPath: /etc/trustplane/encryption
          readOnly: true
        {{- end }}
        {{- if include "trustplane.authentication" $root }}
        - name: authentication
          mountPath: /etc/trustplane/authentication
          readOnly: true
        {{- end }}
  volumes:
    - name: ca
      secret:
        secretName: {{ include "trustplane.caSecret" $root }}
        defaultMode: 0440
    {{- if $root.Values.config.encryptionProviderConfig.secretName }}
    - name: encryption
      secret:
        secretName: {{ $root.Values.config.encryptionProviderConfig.secretName }}
        defaultMode: 0440
    {{- end }}
    {{- if include "trustplane.authentication" $root }}
    - name: authentication
      configMap:
        name: {{ include "trustplane.authenticationConfigMap" $root }}
        defaultMode: 0444
    {{- end }}
{{- end }}
