{{/* nodeLocal's static-pod form (nodeLocal.mode: staticPod) and the rule that
keeps a kubelet's only API path off a DaemonSet. docs/node-local.md explains
both. */}}

{{/* "true" when nodeLocal runs as a static pod. */}}
{{- define "watchmux.staticPod" -}}
{{- if and (eq .Values.mode "nodeLocal") (eq .Values.nodeLocal.mode "staticPod") }}true{{ end }}
{{- end }}

{{/* "true" when the nodes' kubelets use watchmux as their API server
(nodeLocal.kubeletClient; null: true for the static pod). */}}
{{- define "watchmux.kubeletClient" -}}
{{- if eq .Values.mode "nodeLocal" }}
{{- if kindIs "invalid" .Values.nodeLocal.kubeletClient }}
{{- include "watchmux.staticPod" . }}
{{- else if .Values.nodeLocal.kubeletClient }}true{{ end }}
{{- end }}
{{- end }}

{{/* The kubelet reads only manifests whose names do not start with a dot
(pkg/kubelet/config/file.go globs "[^.]*"): the installer writes through one. */}}
{{- define "watchmux.staticPodPath" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.nodeLocal.staticPod.manifestDir) .Values.nodeLocal.staticPod.fileName }}
{{- end }}

{{- define "watchmux.staticPodHostDir" -}}
{{- trimSuffix "/" .Values.nodeLocal.staticPod.hostDir }}
{{- end }}

{{/* The static pod's volumes: host paths only. The kubelet refuses a static
pod that references an API object (Secret, ConfigMap, ServiceAccount, PVC:
podutil.HasAPIObjectReference in pkg/kubelet/config/common.go), and it starts
this one before it can reach the API. */}}
{{- define "watchmux.staticPodVolumes" -}}
{{- $dir := include "watchmux.staticPodHostDir" . }}
{{- if include "watchmux.tlsActive" . }}
- name: tls
  hostPath:
    path: {{ $dir }}/tls
    type: Directory
{{- end }}
{{- if include "watchmux.tree" . }}
- name: tier-kubeconfig
  hostPath:
    path: {{ include "watchmux.treeKubeconfigPath" . }}
    type: File
- name: tier-ca
  hostPath:
    path: {{ include "watchmux.treeCADir" . }}
    type: Directory
{{- if include "watchmux.treeFallback" . }}
- name: fallback-ca
  hostPath:
    path: {{ .Values.nodeLocal.tier.fallback.caHostPath }}
    type: File
{{- end }}
{{- else }}
- name: kubelet-kubeconfig
  hostPath:
    path: {{ .Values.nodeLocal.kubeletKubeconfig }}
    type: File
{{- end }}
{{- with .Values.nodeLocal.kubeletPKIDir }}
- name: kubelet-pki
  hostPath:
    path: {{ . }}
    type: Directory
{{- end }}
{{- if include "watchmux.clientCAActive" . }}
- name: client-ca
  hostPath:
    path: {{ $dir }}/client-ca
    type: Directory
{{- end }}
{{- if include "watchmux.persist" . }}
- name: persist
  hostPath:
    path: {{ .Values.nodeLocal.persist.hostPath }}
    type: DirectoryOrCreate
{{- end }}
{{- if include "watchmux.persistKey" . }}
- name: persist-key
  hostPath:
    path: {{ $dir }}/persist-key
    type: Directory
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The static pod manifest, for <manifestDir>/<fileName>. The same container
as the DaemonSet's; the kubelet names the pod <fullname>-<node> and creates a
read-only mirror pod for it once it reaches the API. */}}
{{- define "watchmux.staticPodManifest" -}}
{{- $podSecurityContext := deepCopy .Values.podSecurityContext }}
{{- /* The kubelet's keys are root's, mode 0600 (as in the DaemonSet). */}}
{{- $_ := set $podSecurityContext "runAsUser" 0 }}
{{- $_ = set $podSecurityContext "runAsGroup" 0 }}
{{- $_ = set $podSecurityContext "runAsNonRoot" false }}
apiVersion: v1
kind: Pod
metadata:
  name: {{ include "watchmux.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "watchmux.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    kubectl.kubernetes.io/default-container: watchmux
    {{- if include "watchmux.tlsGenerated" . }}
    {{- include "watchmux.generateTLS" . }}
    {{- /* A new certificate changes the manifest, so the kubelet restarts
    watchmux, which reads its certificate at start. */}}
    checksum/tls: {{ .Values._watchmuxGeneratedTLS.crt | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  hostNetwork: true
  # The node's resolver: the kubelet's kubeconfig names the API server by a
  # name the node resolves, and cluster DNS may itself need the API.
  dnsPolicy: Default
  # The kubelet warns, and mirror pod creation may fail, unless a static pod
  # has both (getStaticPodPriorityWarning in pkg/kubelet/config/common.go).
  priorityClassName: system-node-critical
  priority: 2000001000
  terminationGracePeriodSeconds: {{ include "watchmux.terminationGrace" . }}
  securityContext:
    {{- toYaml $podSecurityContext | nindent 4 }}
  containers:
    - {{ include "watchmux.container" . | indent 6 | trim }}
  volumes:
    {{- include "watchmux.staticPodVolumes" . | trim | nindent 4 }}
{{- end }}

{{/* The kubelet's kubeconfig for the static pod: its own client certificate,
watchmux's CA from the host directory. */}}
{{- define "watchmux.staticPodKubeletKubeconfig" -}}
{{- $pki := .Values.nodeLocal.kubeletPKIDir | default "/var/lib/kubelet/pki" -}}
apiVersion: v1
kind: Config
clusters:
  - name: watchmux
    cluster:
      server: {{ include "watchmux.clientServer" . }}
      certificate-authority: {{ include "watchmux.staticPodHostDir" . }}/ca.crt
      tls-server-name: {{ .Values.nodeLocal.tlsServerName }}
users:
  - name: kubelet
    user:
      client-certificate: {{ $pki }}/kubelet-client-current.pem
      client-key: {{ $pki }}/kubelet-client-current.pem
contexts:
  - name: watchmux
    context:
      cluster: watchmux
      user: kubelet
current-context: watchmux
{{- end }}

{{/* The DaemonSet form's update strategy type: nodeLocal.updateStrategy.type,
or by default RollingUpdate, OnDelete when the kubelet talks through it (its
replacement pod could not reach it). */}}
{{- define "watchmux.daemonSetUpdateType" -}}
{{- if .Values.nodeLocal.updateStrategy.type }}
{{- .Values.nodeLocal.updateStrategy.type }}
{{- else if include "watchmux.kubeletClient" . }}
{{- "OnDelete" }}
{{- else }}
{{- "RollingUpdate" }}
{{- end }}
{{- end }}

{{/* Refusals for nodeLocal's two forms. */}}
{{- define "watchmux.validateNodeLocal" -}}
{{- if eq .Values.mode "nodeLocal" }}
{{- if and .Values.nodeLocal.persist.encryptionKey.secret (not (include "watchmux.persist" .)) }}
{{- fail "nodeLocal.persist.encryptionKey.secret without persistence: nothing would be stored to encrypt (persistence needs nodeLocal.persist.resources, the cache and delegated auth with the kubelet's credentials). Remove the key, or turn persistence on" }}
{{- end }}
{{- if include "watchmux.tree" . }}
{{- $t := .Values.nodeLocal.tier }}
{{- if not (include "watchmux.kubeletCredentials" .) }}
{{- fail "nodeLocal.tier.server (the tree) needs delegated auth with the kubelet's credentials (auth.mode delegated, no upstream.kubeconfigSecret): watchmux then goes to the tier with the kubelet's client certificate. With upstream.kubeconfigSecret, point that kubeconfig at the tier instead" }}
{{- end }}
{{- if not (hasPrefix "https://" $t.server) }}
{{- fail (printf "nodeLocal.tier.server %s: the tier is reached over TLS (https://...), where the kubelet's client certificate authenticates the node" $t.server) }}
{{- end }}
{{- if not $t.caConfigMap }}
{{- fail "nodeLocal.tier.server needs nodeLocal.tier.caConfigMap: a ConfigMap in this namespace with the CA of the tier's serving certificate (the tier release's <fullname>-kubeconfig has it as ca.crt when the chart generated the certificate)" }}
{{- end }}
{{- if not .Values.nodeLocal.kubeletPKIDir }}
{{- fail "nodeLocal.tier.server needs nodeLocal.kubeletPKIDir: the tree's kubeconfig presents the kubelet's kubelet-client-current.pem from that directory to the tier" }}
{{- end }}
{{- if and (include "watchmux.staticPod" .) (include "watchmux.treeServerInCluster" .) }}
{{- fail (printf "nodeLocal.tier.server %s with nodeLocal.mode staticPod: the static pod is the kubelet's only way to the API and starts before cluster DNS and kube-proxy, so it cannot reach a Service name. Put a load balancer (or another address the node reaches on its own) in front of the tier, e.g. tier.service.type=LoadBalancer in the tier's release, and set nodeLocal.tier.tlsServerName to a name in the tier's certificate" $t.server) }}
{{- end }}
{{- end }}
{{- if and (include "watchmux.kubeletClient" .) (ne .Values.nodeLocal.mode "staticPod") (not .Values.nodeLocal.allowKubeletOnDaemonSet) }}
{{- fail "nodeLocal.kubeletClient with nodeLocal.mode daemonSet: the kubelet's only way to the API would be a DaemonSet pod, and after a reboot the kubelet needs the API to start that pod (it starts only static pods without the API). Use nodeLocal.mode=staticPod for kubelets (docs/node-local.md); keep the DaemonSet for kube-proxy and node agents, or for kubelets that keep talking to kube-apiserver directly (nodeLocal.kubeletClient=false). nodeLocal.allowKubeletOnDaemonSet=true accepts the risk" }}
{{- end }}
{{- if and (include "watchmux.kubeletClient" .) (not (include "watchmux.staticPod" .)) (eq (toString .Values.nodeLocal.updateStrategy.type) "RollingUpdate") }}
{{- fail "nodeLocal.updateStrategy.type RollingUpdate with the kubelet as a client of the DaemonSet: once its watchmux pod is deleted, the kubelet cannot reach the API to learn of the replacement. Leave updateStrategy.type null (OnDelete here) and replace pods node by node, pointing each kubelet back at kube-apiserver first, or use nodeLocal.mode=staticPod" }}
{{- end }}
{{- if include "watchmux.staticPod" . }}
{{- if not (include "watchmux.kubeletCredentials" .) }}
{{- fail "nodeLocal.mode staticPod needs delegated auth with the kubelet's credentials (auth.mode delegated, no upstream.kubeconfigSecret): a static pod cannot mount a Secret or a ServiceAccount token, only host files" }}
{{- end }}
{{- if not .Values.nodeLocal.hostNetwork }}
{{- fail "nodeLocal.mode staticPod needs nodeLocal.hostNetwork=true: the kubelet dials watchmux on the node's loopback before any pod network exists" }}
{{- end }}
{{- if not (include "watchmux.tlsActive" .) }}
{{- fail "nodeLocal.mode staticPod needs tls.enabled: kubelets authenticate to watchmux with their client certificates, over TLS" }}
{{- end }}
{{- range .Values.extraVolumes }}
{{- if not .hostPath }}
{{- fail (printf "extraVolumes %s: nodeLocal.mode staticPod takes only hostPath volumes (the kubelet starts a static pod without the API, and refuses one that references a Secret, ConfigMap or PVC)" .name) }}
{{- end }}
{{- end }}
{{- range .Values.extraEnv }}
{{- if and .valueFrom (or .valueFrom.secretKeyRef .valueFrom.configMapKeyRef) }}
{{- fail (printf "extraEnv %s: nodeLocal.mode staticPod cannot read a Secret or ConfigMap (the kubelet refuses a static pod that references API objects)" .name) }}
{{- end }}
{{- end }}
{{- if eq .Values.image.pullPolicy "Always" }}
{{- fail "nodeLocal.mode staticPod with image.pullPolicy Always: after a reboot the kubelet would have to reach the registry before watchmux, its only way to the API, can start. Use IfNotPresent (the image stays in the node's image store) and a tag or digest per release" }}
{{- end }}
{{- if hasPrefix "." .Values.nodeLocal.staticPod.fileName }}
{{- fail "nodeLocal.staticPod.fileName must not start with a dot: the kubelet skips dot files in its manifest directory" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
