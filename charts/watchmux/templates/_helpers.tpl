{{/* Names ------------------------------------------------------------------ */}}

{{- define "watchmux.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "watchmux.fullname" -}}
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

{{- define "watchmux.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "watchmux.selectorLabels" -}}
app.kubernetes.io/name: {{ include "watchmux.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels but app.kubernetes.io/component, which each
object says once: watchmux.labels (the mode), or its own. */}}
{{- define "watchmux.labelsWithoutComponent" -}}
helm.sh/chart: {{ include "watchmux.chart" . }}
{{ include "watchmux.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "watchmux.labels" -}}
{{ include "watchmux.labelsWithoutComponent" . }}
app.kubernetes.io/component: {{ .Values.mode | kebabcase }}
{{- end }}

{{- define "watchmux.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "watchmux.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "watchmux.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "host:port", with IPv6 literals in brackets. Call with (list host port). */}}
{{- define "watchmux.hostPort" -}}
{{- $host := index . 0 | toString }}
{{- $port := index . 1 | toString }}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) }}
{{- printf "[%s]:%s" $host $port }}
{{- else }}
{{- printf "%s:%s" $host $port }}
{{- end }}
{{- end }}

{{/* TLS ---------------------------------------------------------------------- */}}

{{/* "true" when the API listener serves TLS (never in sidecar mode). */}}
{{- define "watchmux.tlsActive" -}}
{{- if and .Values.tls.enabled (ne .Values.mode "sidecar") }}true{{ end }}
{{- end }}

{{/*
"true" when this render can read the cluster: helm install and upgrade (and
Flux's helm-controller, which runs them), not helm template (Argo CD renders
with it), helm install --dry-run or helm lint, where lookup answers nothing.
kube-system is looked up because it exists in every cluster, also before
--create-namespace has made the release's namespace. Memoised in .Values: one
lookup per render.
*/}}
{{- define "watchmux.clusterVisible" -}}
{{- if not (hasKey .Values "_watchmuxClusterVisible") }}
{{- $_ := set .Values "_watchmuxClusterVisible" (not (empty (lookup "v1" "Namespace" "" "kube-system"))) }}
{{- end }}
{{- if .Values._watchmuxClusterVisible }}true{{ end }}
{{- end }}

{{/*
"true" when no source of the serving certificate is chosen (no
tls.existingSecret, certManager.enabled false): the chart provides it, by
generating it or, per tls.generated.withoutCluster, with cert-manager.
*/}}
{{- define "watchmux.tlsChartProvided" -}}
{{- if and (include "watchmux.tlsActive" .) (not .Values.tls.existingSecret) (not .Values.certManager.enabled) }}true{{ end }}
{{- end }}

{{/*
"true" when the chart itself generates the serving certificate (genCA): in
renders that can look the earlier one up and keep it, and in the others only
with tls.generated.withoutCluster=generate. A render that cannot look it up
would otherwise put a new CA and key in every render, and GitOps tools that
render with helm template would replace them (and restart every pod) on every
sync.
*/}}
{{- define "watchmux.tlsGenerated" -}}
{{- if and (include "watchmux.tlsChartProvided" .) (or (include "watchmux.clusterVisible" .) (eq .Values.tls.generated.withoutCluster "generate")) }}true{{ end }}
{{- end }}

{{/* "true" when cert-manager issues the serving certificate: chosen with
certManager.enabled, or the chart's default where it cannot generate one that
every render keeps (tls.generated.withoutCluster=certManager). */}}
{{- define "watchmux.tlsCertManager" -}}
{{- if and (include "watchmux.tlsActive" .) (or .Values.certManager.enabled (and (include "watchmux.tlsChartProvided" .) (not (include "watchmux.tlsGenerated" .)))) }}true{{ end }}
{{- end }}

{{- define "watchmux.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "watchmux.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{- define "watchmux.caSecretName" -}}
{{- printf "%s-ca" (include "watchmux.fullname" .) }}
{{- end }}

{{/* DNS names of the serving certificate, as a YAML list. */}}
{{- define "watchmux.certDNSNames" -}}
{{- $fullname := include "watchmux.fullname" . }}
{{- $names := list }}
{{- if eq .Values.mode "nodeLocal" }}
{{- $names = list "localhost" .Values.nodeLocal.tlsServerName }}
{{- else }}
{{- $ns := .Release.Namespace }}
{{- $names = list $fullname (printf "%s.%s" $fullname $ns) (printf "%s.%s.svc" $fullname $ns) (printf "%s.%s.svc.%s" $fullname $ns .Values.clusterDomain) }}
{{- end }}
{{- concat $names .Values.tls.extraDNSNames | uniq | toYaml }}
{{- end }}

{{/* IP addresses of the serving certificate, as a YAML list. */}}
{{- define "watchmux.certIPAddresses" -}}
{{- $ips := list }}
{{- if eq .Values.mode "nodeLocal" }}
{{- $ips = list "127.0.0.1" }}
{{- $addr := .Values.nodeLocal.listenAddress | toString }}
{{- if and .Values.nodeLocal.hostNetwork (regexMatch "^[0-9.]+$|:" $addr) (ne $addr "0.0.0.0") (ne $addr "::") }}
{{- $ips = append $ips $addr }}
{{- end }}
{{- end }}
{{- concat $ips .Values.tls.extraIPAddresses | uniq | toYaml }}
{{- end }}

{{/*
Generates (or, on upgrades, looks up and keeps) the CA and the serving
certificate, once per render: the result is memoised in .Values so that the
Secret, the pod template's checksum and the client ConfigMap all see the same
certificate. The CA is reused while its Secret exists; the serving certificate
is reused while its subject alternative names are unchanged.
*/}}
{{- define "watchmux.generateTLS" -}}
{{- if not (hasKey .Values "_watchmuxGeneratedTLS") }}
{{- $fullname := include "watchmux.fullname" . }}
{{- $dns := include "watchmux.certDNSNames" . | fromYamlArray }}
{{- $ips := include "watchmux.certIPAddresses" . | fromYamlArray }}
{{- $sans := printf "dns=%s;ip=%s" (join "," $dns) (join "," $ips) | sha256sum | trunc 16 }}
{{- $caSecret := lookup "v1" "Secret" .Release.Namespace (include "watchmux.caSecretName" .) }}
{{- $tlsSecret := lookup "v1" "Secret" .Release.Namespace (include "watchmux.tlsSecretName" .) }}
{{- $ca := dict }}
{{- $caData := dig "data" dict $caSecret }}
{{- if and (index $caData "tls.crt") (index $caData "tls.key") }}
{{- $ca = buildCustomCert (index $caData "tls.crt") (index $caData "tls.key") }}
{{- else }}
{{- $ca = genCA (printf "%s-ca" $fullname) (int .Values.tls.generated.caValidityDays) }}
{{- end }}
{{- $tlsData := dig "data" dict $tlsSecret }}
{{- $tlsSans := dig "metadata" "annotations" "watchmux.io/subject-alt-names" "" $tlsSecret }}
{{- $crt := "" }}
{{- $key := "" }}
{{- if and (index $tlsData "tls.crt") (index $tlsData "tls.key") (eq (index $tlsData "ca.crt" | default "") ($ca.Cert | b64enc)) (eq $tlsSans $sans) }}
{{- $crt = index $tlsData "tls.crt" | b64dec }}
{{- $key = index $tlsData "tls.key" | b64dec }}
{{- else }}
{{- /* ECDSA P-256: a TLS handshake costs the server a third of RSA 2048's CPU
       (0.27 against 0.83 ms measured), which a reconnect storm pays once per
       client (docs/benchmarks.md, "The serving key"). */}}
{{- $cert := genSignedCertWithKey $fullname $ips $dns (int .Values.tls.generated.certValidityDays) $ca (genPrivateKey "ecdsa") }}
{{- $crt = $cert.Cert }}
{{- $key = $cert.Key }}
{{- end }}
{{- $_ := set .Values "_watchmuxGeneratedTLS" (dict "caCrt" $ca.Cert "caKey" $ca.Key "crt" $crt "key" $key "sans" $sans) }}
{{- end }}
{{- end }}

{{/* Listeners ---------------------------------------------------------------- */}}

{{- define "watchmux.listenAddress" -}}
{{- if eq .Values.mode "sidecar" }}
{{- include "watchmux.hostPort" (list "127.0.0.1" .Values.sidecar.port) }}
{{- else if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.hostNetwork }}
{{- include "watchmux.hostPort" (list .Values.nodeLocal.listenAddress .Values.nodeLocal.port) }}
{{- else }}
{{- include "watchmux.hostPort" (list .Values.api.listenAddress .Values.api.port) }}
{{- end }}
{{- end }}

{{/* The API port inside the pod's network namespace. */}}
{{- define "watchmux.apiPort" -}}
{{- if eq .Values.mode "sidecar" }}
{{- .Values.sidecar.port }}
{{- else if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.hostNetwork }}
{{- .Values.nodeLocal.port }}
{{- else }}
{{- .Values.api.port }}
{{- end }}
{{- end }}

{{- define "watchmux.adminHost" -}}
{{- if .Values.admin.listenAddress }}
{{- .Values.admin.listenAddress }}
{{- else if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.hostNetwork .Values.nodeLocal.adminOnHostIP }}
{{- "$(HOST_IP)" }}
{{- else if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.hostNetwork }}
{{- "127.0.0.1" }}
{{- else }}
{{- "0.0.0.0" }}
{{- end }}
{{- end }}

{{/* The URL clients put in their kubeconfig. */}}
{{- define "watchmux.clientServer" -}}
{{- $scheme := ternary "https" "http" (eq (include "watchmux.tlsActive" .) "true") }}
{{- if eq .Values.mode "sidecar" }}
{{- printf "http://%s" (include "watchmux.hostPort" (list "127.0.0.1" .Values.sidecar.port)) }}
{{- else if eq .Values.mode "nodeLocal" }}
{{- default (printf "%s://%s" $scheme (include "watchmux.hostPort" (list "127.0.0.1" .Values.nodeLocal.port))) .Values.nodeLocal.clientServer }}
{{- else }}
{{- printf "%s://%s.%s.svc:%v" $scheme (include "watchmux.fullname" .) .Release.Namespace .Values.tier.service.port }}
{{- end }}
{{- end }}

{{/* Cache ---------------------------------------------------------------------- */}}

{{/* The binary's own --cache-resources default (what kubelets, kube-proxy and
node agents watch); chart-check.sh compares it with `watchmux --help`. */}}
{{- define "watchmux.binaryDefaultResources" -}}
{{- toYaml (list "pods" "nodes" "services" "endpoints" "endpointslices.discovery.k8s.io" "namespaces" "configmaps" "runtimeclasses.node.k8s.io" "csidrivers.storage.k8s.io") }}
{{- end }}

{{/* What the Node authorizer lets a node list and watch (kube-apiserver 1.37,
checked against a real one by chart-check.sh), as resource[.group]: the field
a list must select the node itself by ("$(NODE_NAME)"), or "" when a node may
list them all. Everything else a node reads (configmaps, secrets, PVCs of its
pods; endpoints) it may only get, or list one object at a time. */}}
{{- define "watchmux.nodeListable" -}}
{{- toYaml (dict "pods" "spec.nodeName" "nodes" "metadata.name" "resourceslices.resource.k8s.io" "spec.nodeName" "services" "" "runtimeclasses.node.k8s.io" "" "csidrivers.storage.k8s.io" "" "certificatesigningrequests.certificates.k8s.io" "") }}
{{- end }}

{{/* cache.resources, or when null the mode's default: with the kubelet's
credentials what a node may list and watch and its kubelet reads, otherwise
the binary's default. */}}
{{- define "watchmux.cacheResources" -}}
{{- if not (kindIs "invalid" .Values.cache.resources) }}
{{- toYaml .Values.cache.resources }}
{{- else if include "watchmux.kubeletCredentials" . }}
{{- toYaml (list "pods" "nodes" "services" "runtimeclasses.node.k8s.io" "csidrivers.storage.k8s.io") }}
{{- else }}
{{- include "watchmux.binaryDefaultResources" . }}
{{- end }}
{{- end }}

{{/* "true" when nodeLocal keeps caches on the node's disk (nodeLocal.persist):
with the kubelet's credentials, whose uid 0 can write the host directory. */}}
{{- define "watchmux.persist" -}}
{{- if and (eq .Values.mode "nodeLocal") .Values.cache.enabled .Values.nodeLocal.persist.resources (include "watchmux.kubeletCredentials" .) }}true{{ end }}
{{- end }}

{{/* "true" when the persisted objects are encrypted with a key from a Secret
(nodeLocal.persist.encryptionKey.secret). */}}
{{- define "watchmux.persistKey" -}}
{{- if and (include "watchmux.persist" .) .Values.nodeLocal.persist.encryptionKey.secret }}true{{ end }}
{{- end }}

{{/* "true" when cache.resources holds "*": every listable, watchable resource. */}}
{{- define "watchmux.cacheAll" -}}
{{- if and .Values.cache.enabled (has "*" (include "watchmux.cacheResources" . | fromYamlArray)) }}true{{ end }}
{{- end }}

{{/* resource[.group] names that cache.watchCacheSizes turns off (size 0), as a YAML list. */}}
{{- define "watchmux.cacheOff" -}}
{{- $off := list }}
{{- range .Values.cache.watchCacheSizes }}
{{- $parts := splitn "#" 2 . }}
{{- if eq (int $parts._1) 0 }}{{ $off = append $off $parts._0 }}{{ end }}
{{- end }}
{{- toYaml $off }}
{{- end }}

{{/* The resources that are cached, as a YAML list of resource[.group]: empty
with the cache off or with "*" (which watchmux resolves by discovery). */}}
{{- define "watchmux.cachedResources" -}}
{{- $out := list }}
{{- if and .Values.cache.enabled (not (include "watchmux.cacheAll" .)) }}
{{- $off := include "watchmux.cacheOff" . | fromYamlArray }}
{{- range include "watchmux.cacheResources" . | fromYamlArray }}
{{- if not (has . $off) }}{{ $out = append $out . }}{{ end }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* "true" when resource[.group] (the argument is (list $ name)) is cached. */}}
{{- define "watchmux.isCached" -}}
{{- $ := index . 0 }}
{{- $name := index . 1 }}
{{- if include "watchmux.cacheAll" $ }}
{{- if not (has $name (include "watchmux.cacheOff" $ | fromYamlArray)) }}true{{ end }}
{{- else if has $name (include "watchmux.cachedResources" $ | fromYamlArray) }}true{{ end }}
{{- end }}

{{/* "true" for --upstream-watch-list: upstream.watchList, or by default when
a nodeLocal watchmux's upstream is a tier (the tree). */}}
{{- define "watchmux.upstreamWatchList" -}}
{{- if kindIs "bool" .Values.upstream.watchList }}
{{- if .Values.upstream.watchList }}true{{ end }}
{{- else }}
{{- include "watchmux.tree" . }}
{{- end }}
{{- end }}

{{/* --goaway-chance's value, or "" for none (0 is the binary's default):
limits.goawayChance (a number, or a string from --set, which the schema
cannot bound), or by default 0.02 in tier (replicas behind a Service,
to be rebalanced after a rollout) and nothing in nodeLocal and sidecar (one
watchmux per node or application: nothing to balance). */}}
{{- define "watchmux.goawayChance" -}}
{{- $chance := .Values.limits.goawayChance }}
{{- if kindIs "invalid" $chance }}
{{- if eq .Values.mode "tier" }}0.02{{ end }}
{{- else if gt (float64 $chance) 0.02 }}
{{- fail (printf "limits.goawayChance %v: --goaway-chance can not be less than 0 or greater than 0.02" $chance) }}
{{- else if gt (float64 $chance) 0.0 }}
{{- $chance }}
{{- end }}
{{- end }}

{{/* --max-connection-age's value, or "" for none (the binary's default):
limits.maxConnectionAge, or by default 5m in tier (replicas behind a
Service, whose kubelet-shaped clients the GOAWAY chance barely moves) and
nothing in nodeLocal and sidecar (nothing to balance). */}}
{{- define "watchmux.maxConnectionAge" -}}
{{- $age := .Values.limits.maxConnectionAge }}
{{- if kindIs "invalid" $age }}
{{- if eq .Values.mode "tier" }}5m{{ end }}
{{- else }}
{{- $age }}
{{- end }}
{{- end }}

{{/* "true" for --cache-warm: cache.warm, or by default in nodeLocal and tier. */}}
{{- define "watchmux.cacheWarm" -}}
{{- if .Values.cache.enabled }}
{{- if kindIs "bool" .Values.cache.warm }}
{{- if .Values.cache.warm }}true{{ end }}
{{- else if ne .Values.mode "sidecar" }}true{{ end }}
{{- end }}
{{- end }}

{{/* The --cache-scope entries as a YAML map RESOURCE: SELECTORS: cache.scopes;
in nodeLocal the node's own pods unless cache.scopes has a pods entry; with
the kubelet's credentials also its own Node and ResourceSlices (a node may
list those only so), unless cache.scopes has an entry. */}}
{{- define "watchmux.cacheScopes" -}}
{{- $scopes := dict }}
{{- if .Values.cache.enabled }}
{{- $scopes = deepCopy .Values.cache.scopes }}
{{- if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.scopePodsToNode (not (hasKey $scopes "pods")) (include "watchmux.isCached" (list . "pods")) }}
{{- $_ := set $scopes "pods" "fieldSelector=spec.nodeName=$(NODE_NAME)" }}
{{- end }}
{{- if include "watchmux.kubeletCredentials" . }}
{{- $listable := include "watchmux.nodeListable" . | fromYaml }}
{{- range $resource := list "nodes" "resourceslices.resource.k8s.io" }}
{{- if and (not (hasKey $scopes $resource)) (include "watchmux.isCached" (list $ $resource)) }}
{{- $_ := set $scopes $resource (printf "fieldSelector=%s=$(NODE_NAME)" (index $listable $resource)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $scopes }}
{{- end }}

{{/* API groups the binary treats as built in (src/cache/resource_info.rs,
is_builtin_group); resources of any other group are custom, and watchmux reads
their CustomResourceDefinition for its selectableFields. */}}
{{- define "watchmux.builtinGroups" -}}
{{- toYaml (list "" "admissionregistration.k8s.io" "apiextensions.k8s.io" "apiregistration.k8s.io" "apps" "authentication.k8s.io" "authorization.k8s.io" "autoscaling" "batch" "certificates.k8s.io" "coordination.k8s.io" "discovery.k8s.io" "events.k8s.io" "flowcontrol.apiserver.k8s.io" "internal.apiserver.k8s.io" "networking.k8s.io" "node.k8s.io" "policy" "rbac.authorization.k8s.io" "resource.k8s.io" "scheduling.k8s.io" "storage.k8s.io" "storagemigration.k8s.io") }}
{{- end }}

{{/* ClusterRole rules for what the cache lists and watches (none with the
cache off): get/list/watch on each cached resource, grouped by API group, and
get on the CustomResourceDefinitions of cached custom resources. "*" gets
list/watch on everything but not get: RBAC's "*" also matches subresources,
and get on nodes/proxy, pods/log, pods/exec or services/proxy is far more than
reading objects. */}}
{{- define "watchmux.cacheRules" -}}
{{- if include "watchmux.cacheAll" . }}
# cache.resources "*": list and watch everything; get only the
# CustomResourceDefinitions (selectableFields). No get on "*", which would
# match subresources such as nodes/proxy and pods/exec too.
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get"]
{{- else }}
{{- $builtin := include "watchmux.builtinGroups" . | fromYamlArray }}
{{- $byGroup := dict }}
{{- $crds := list }}
{{- range include "watchmux.cachedResources" . | fromYamlArray }}
{{- $parts := splitn "." 2 . }}
{{- $group := $parts._1 | default "" }}
{{- $_ := set $byGroup $group (append (get $byGroup $group | default list) $parts._0) }}
{{- if not (has $group $builtin) }}{{ $crds = append $crds . }}{{ end }}
{{- end }}
{{- if $byGroup }}
# The cached resources (cache.resources, minus what cache.watchCacheSizes
# turns off).
{{- end }}
{{- range $group := keys $byGroup | sortAlpha }}
- apiGroups: [{{ $group | quote }}]
  resources: {{ index $byGroup $group | toJson }}
  verbs: ["get", "list", "watch"]
{{- end }}
{{- with $crds }}
# The CustomResourceDefinitions of the cached custom resources, for their
# selectableFields.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
{{- end }}
{{- end }}

{{/* Auth ----------------------------------------------------------------------- */}}

{{/* The effective --auth-mode: auth.mode, or the mode's default: trusted-local
for sidecar (it listens on loopback), delegated for nodeLocal and tier (they
listen where other pods and kubelets reach them; the binary refuses
trusted-local there without --allow-unauthenticated-remote). */}}
{{- define "watchmux.authMode" -}}
{{- if .Values.auth.mode }}
{{- .Values.auth.mode }}
{{- else if eq .Values.mode "sidecar" }}
{{- "trusted-local" }}
{{- else }}
{{- "delegated" }}
{{- end }}
{{- end }}

{{/* "true" when requests that pass through go upstream with the caller's own
credentials (--upstream-identity=client): nodeLocal with delegated auth. Its
watchmux then holds no right of its own beyond its upstream credentials (the
node's), instead of a ServiceAccount that may impersonate anyone: no RBAC, no
service-account token in the pod. */}}
{{- define "watchmux.clientIdentity" -}}
{{- if and (eq .Values.mode "nodeLocal") (eq (include "watchmux.authMode" .) "delegated") }}true{{ end }}
{{- end }}

{{/* "true" when watchmux's upstream credentials are the node's kubelet's, read
from the host (nodeLocal.kubeletKubeconfig, nodeLocal.kubeletPKIDir):
clientIdentity, unless upstream.kubeconfigSecret names other credentials. */}}
{{- define "watchmux.kubeletCredentials" -}}
{{- if and (include "watchmux.clientIdentity" .) (not .Values.upstream.kubeconfigSecret.name) }}true{{ end }}
{{- end }}

{{/* "true" when nodeLocal.tier.server names a Service (cluster DNS and
kube-proxy on the way). */}}
{{- define "watchmux.treeServerInCluster" -}}
{{- if regexMatch `^https://[^/:]+\.svc(\.[^/:]*)?(:[0-9]+)?(/.*)?$` .Values.nodeLocal.tier.server }}true{{ end }}
{{- end }}

{{/* The tree: "true" when a nodeLocal watchmux's upstream is a tier watchmux
(nodeLocal.tier.server) instead of kube-apiserver. It goes there with the
kubelet's client certificate, through a kubeconfig of the chart's. */}}
{{- define "watchmux.tree" -}}
{{- if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.tier.server }}true{{ end }}
{{- end }}

{{/* Where the tree's files are in the container: the static pod's on the host
(mounted at the same paths), the DaemonSet's from ConfigMaps. */}}
{{- define "watchmux.treeKubeconfigPath" -}}
{{- if include "watchmux.staticPod" . }}
{{- printf "%s/upstream.conf" (include "watchmux.staticPodHostDir" .) }}
{{- else }}
{{- "/etc/watchmux/tier/kubeconfig" }}
{{- end }}
{{- end }}

{{- define "watchmux.treeCADir" -}}
{{- if include "watchmux.staticPod" . }}
{{- printf "%s/tier-ca" (include "watchmux.staticPodHostDir" .) }}
{{- else }}
{{- "/etc/watchmux/tier-ca" }}
{{- end }}
{{- end }}

{{/* watchmux's upstream kubeconfig in the tree: the tier, verified with its
CA, and the kubelet's own rotating client certificate. */}}
{{- define "watchmux.treeKubeconfig" -}}
{{- $t := .Values.nodeLocal.tier -}}
{{- $pki := trimSuffix "/" .Values.nodeLocal.kubeletPKIDir -}}
apiVersion: v1
kind: Config
clusters:
  - name: watchmux-tier
    cluster:
      server: {{ $t.server }}
      certificate-authority: {{ include "watchmux.treeCADir" . }}/{{ $t.caKey }}
      {{- with $t.tlsServerName }}
      tls-server-name: {{ . }}
      {{- end }}
users:
  - name: kubelet
    user:
      client-certificate: {{ $pki }}/kubelet-client-current.pem
      client-key: {{ $pki }}/kubelet-client-current.pem
contexts:
  - name: watchmux-tier
    context:
      cluster: watchmux-tier
      user: kubelet
current-context: watchmux-tier
{{- end }}

{{/* "true" when the tree has fallback servers (nodeLocal.tier.fallback). */}}
{{- define "watchmux.treeFallback" -}}
{{- if and (include "watchmux.tree" .) .Values.nodeLocal.tier.fallback.servers }}true{{ end }}
{{- end }}

{{/* The --kubeconfig watchmux is given, or "" for the in-cluster service account. */}}
{{- define "watchmux.upstreamKubeconfig" -}}
{{- if .Values.upstream.kubeconfigSecret.name }}
{{- printf "/etc/watchmux/upstream/%s" .Values.upstream.kubeconfigSecret.key }}
{{- else if and (include "watchmux.kubeletCredentials" .) (include "watchmux.tree" .) }}
{{- include "watchmux.treeKubeconfigPath" . }}
{{- else if include "watchmux.kubeletCredentials" . }}
{{- .Values.nodeLocal.kubeletKubeconfig }}
{{- end }}
{{- end }}

{{/* "true" when the client CA ConfigMap is mounted (--client-ca-file). */}}
{{- define "watchmux.clientCAActive" -}}
{{- if and (eq (include "watchmux.authMode" .) "delegated") .Values.auth.clientCA.configMap }}true{{ end }}
{{- end }}

{{/* Container ---------------------------------------------------------------- */}}

{{- define "watchmux.args" -}}
- --listen={{ include "watchmux.listenAddress" . }}
- --admin-listen={{ include "watchmux.hostPort" (list (include "watchmux.adminHost" .) .Values.admin.port) }}
{{- if include "watchmux.tlsActive" . }}
- --tls-cert-file=/etc/watchmux/tls/tls.crt
- --tls-private-key-file=/etc/watchmux/tls/tls.key
{{- end }}
{{- with include "watchmux.upstreamKubeconfig" . }}
- --kubeconfig={{ . }}
{{- with and (not (include "watchmux.tree" $)) $.Values.upstream.context }}
- --context={{ . }}
{{- end }}
{{- end }}
{{- if .Values.upstream.http1Only }}
- --upstream-http1-only
{{- end }}
{{- with .Values.upstream.servers }}
{{- if include "watchmux.tree" $ }}
{{- fail "upstream.servers lists API servers: in the tree (nodeLocal.tier.server) the upstream is the tier" }}
{{- end }}
- --upstream-servers={{ join "," . }}
{{- end }}
{{- if .Values.upstream.discoverServers }}
{{- if include "watchmux.tree" . }}
{{- fail "upstream.discoverServers: in the tree (nodeLocal.tier.server) the API servers are the fallback: list them in nodeLocal.tier.fallback.servers" }}
{{- end }}
{{- if include "watchmux.clientIdentity" . }}
{{- fail "upstream.discoverServers with the kubelet's credentials (nodeLocal, delegated): a node may not list EndpointSlices; list the API servers in upstream.servers" }}
{{- end }}
- --upstream-discover-servers
{{- end }}
{{- with .Values.nodeLocal.tier.fallback.servers }}
{{- if not (include "watchmux.tree" $) }}
{{- fail "nodeLocal.tier.fallback.servers are the tree's fallback (nodeLocal.tier.server); without a tier, list API servers in upstream.servers" }}
{{- end }}
{{- if not $.Values.nodeLocal.tier.fallback.caHostPath }}
{{- fail "nodeLocal.tier.fallback.servers needs nodeLocal.tier.fallback.caHostPath: a host file with the API servers' CA (the tier's CA is not theirs; kubeadm: /etc/kubernetes/pki/ca.crt)" }}
{{- end }}
- --upstream-fallback-servers={{ join "," . }}
- --upstream-fallback-ca-file={{ $.Values.nodeLocal.tier.fallback.caHostPath }}
{{- with $.Values.nodeLocal.tier.fallback.tlsServerName }}
- --upstream-fallback-tls-server-name={{ . }}
{{- end }}
{{- end }}
{{- if include "watchmux.upstreamWatchList" . }}
- --upstream-watch-list=true
{{- end }}
- --logging-format={{ .Values.logFormat }}
- --shutdown-grace={{ .Values.shutdownGrace }}
{{- if .Values.cache.enabled }}
- --cache-resources={{ include "watchmux.cacheResources" . | fromYamlArray | join "," }}
{{- with .Values.cache.watchCacheSizes }}
- --watch-cache-sizes={{ join "," . }}
{{- end }}
{{- if include "watchmux.cacheWarm" . }}
- --cache-warm
{{- end }}
- --events-history-window={{ .Values.cache.historyWindow }}
- --slow-watcher-grace={{ .Values.cache.slowWatcherGrace }}
- --consistency-check-period={{ .Values.cache.consistencyCheckPeriod }}
{{- if eq (toString .Values.cache.compressResponses) "false" }}
- --compress-responses=false
{{- end }}
{{- $scopes := include "watchmux.cacheScopes" . | fromYaml }}
{{- range $resource := keys $scopes | sortAlpha }}
- {{ printf "--cache-scope=%s=%s" $resource (index $scopes $resource) | quote }}
{{- end }}
{{- if include "watchmux.persist" . }}
- --persist-dir={{ .Values.nodeLocal.persist.hostPath }}
- --persist-resources={{ join "," .Values.nodeLocal.persist.resources }}
{{- end }}
{{- if include "watchmux.persistKey" . }}
- --persist-encryption-key-file=/etc/watchmux/persist-key/{{ .Values.nodeLocal.persist.encryptionKey.key }}
{{- end }}
{{- if and (eq .Values.mode "nodeLocal") .Values.nodeLocal.serveStaleWhenUpstreamUnreachable }}
- --serve-stale-when-upstream-unreachable
{{- end }}
{{- else }}
{{- /* The binary caches its default resources unless told otherwise. */}}
- --cache-resources=
{{- end }}
{{- $authMode := include "watchmux.authMode" . }}
- --auth-mode={{ $authMode }}
{{- if and (eq $authMode "trusted-local") .Values.auth.allowUnauthenticatedRemote }}
- --allow-unauthenticated-remote
{{- end }}
{{- if and (eq $authMode "trusted-local") .Values.auth.acceptHosts }}
- {{ printf "--accept-hosts=%s" (join "," .Values.auth.acceptHosts) | quote }}
{{- end }}
{{- if eq $authMode "delegated" }}
{{- if not (include "watchmux.tlsActive" .) }}
{{- /* tls.enabled=false: bearer tokens in clear, and kubectl sends none over
       plain HTTP; watchmux refuses that unless told (the operator's choice). */}}
- --allow-insecure-delegated
{{- end }}
{{- if include "watchmux.clientIdentity" . }}
- --upstream-identity=client
{{- end }}
{{- if .Values.auth.clientCA.configMap }}
- --client-ca-file=/etc/watchmux/client-ca/{{ .Values.auth.clientCA.key }}
{{- end }}
{{- if not .Values.auth.anonymous }}
- --anonymous-auth=false
{{- end }}
{{- with .Values.auth.cacheTTL.token }}
- --authentication-token-cache-ttl={{ . }}
{{- end }}
{{- with .Values.auth.cacheTTL.tokenNegative }}
- --authentication-token-negative-cache-ttl={{ . }}
{{- end }}
{{- with .Values.auth.cacheTTL.authorized }}
- --authorization-cache-authorized-ttl={{ . }}
{{- end }}
{{- with .Values.auth.cacheTTL.unauthorized }}
- --authorization-cache-unauthorized-ttl={{ . }}
{{- end }}
{{- end }}
- --max-requests-inflight={{ int .Values.limits.maxRequestsInflight }}
- --max-connections={{ int .Values.limits.maxConnections }}
- --max-request-body-bytes={{ int64 .Values.limits.maxRequestBodyBytes }}
{{- if ne (toString .Values.limits.fairnessSeats) "" }}
- --fairness-seats={{ int .Values.limits.fairnessSeats }}
{{- end }}
{{- with .Values.limits.fairnessQueueWait }}
- --fairness-queue-wait={{ . }}
{{- end }}
{{- if ne (toString .Values.limits.passthroughBufferBytes) "" }}
- --passthrough-buffer-bytes={{ int64 .Values.limits.passthroughBufferBytes }}
{{- end }}
{{- with include "watchmux.goawayChance" . }}
- --goaway-chance={{ . }}
{{- end }}
{{- with include "watchmux.maxConnectionAge" . }}
- --max-connection-age={{ . }}
{{- end }}
{{- with .Values.limits.maxConnectionAgeGrace }}
- --max-connection-age-grace={{ . }}
{{- end }}
{{- with .Values.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "watchmux.env" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if ne .Values.mode "sidecar" }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- end }}
{{- with .Values.upstream.apiserverHost }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
{{- end }}
{{- with .Values.upstream.apiserverPort }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The container's requests and limits: resources, or when null the mode's
own (tier.resources, nodeLocal.resources, sidecar.resources: README "Sizing"). */}}
{{- define "watchmux.resources" -}}
{{- if kindIs "invalid" .Values.resources }}
{{- toYaml (index .Values .Values.mode).resources }}
{{- else }}
{{- toYaml .Values.resources }}
{{- end }}
{{- end }}

{{/* Seconds for terminationGracePeriodSeconds: --shutdown-grace plus 5. */}}
{{- define "watchmux.terminationGrace" -}}
{{- $d := .Values.shutdownGrace | toString }}
{{- $n := regexFind "^[0-9.]+" $d | float64 }}
{{- $unit := trimPrefix (regexFind "^[0-9.]+" $d) $d }}
{{- $secs := $n }}
{{- if eq $unit "ms" }}{{ $secs = divf $n 1000 }}{{ end }}
{{- if eq $unit "m" }}{{ $secs = mulf $n 60 }}{{ end }}
{{- if eq $unit "h" }}{{ $secs = mulf $n 3600 }}{{ end }}
{{- add (ceil $secs | int) 5 }}
{{- end }}

{{/* The watchmux container, shared by the DaemonSet, the Deployment and the
sidecar snippet in NOTES.txt. */}}
{{- define "watchmux.container" -}}
{{- $adminHost := include "watchmux.adminHost" . -}}
name: watchmux
image: {{ include "watchmux.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  {{- include "watchmux.args" . | nindent 2 }}
env:
  {{- include "watchmux.env" . | nindent 2 }}
ports:
  - name: {{ ternary "https" "http" (eq (include "watchmux.tlsActive" .) "true") }}
    containerPort: {{ include "watchmux.apiPort" . }}
    protocol: TCP
    {{- if and (eq .Values.mode "nodeLocal") (not .Values.nodeLocal.hostNetwork) }}
    hostPort: {{ .Values.nodeLocal.port }}
    {{- with .Values.nodeLocal.hostIP }}
    hostIP: {{ . }}
    {{- end }}
    {{- end }}
  - name: admin
    containerPort: {{ .Values.admin.port }}
    protocol: TCP
{{- if eq .Values.mode "sidecar" }}
startupProbe:
  httpGet:
    path: /livez
    port: admin
  periodSeconds: 1
  failureThreshold: 30
{{- end }}
livenessProbe:
  httpGet:
    path: /livez
    port: admin
    {{- if eq $adminHost "127.0.0.1" }}
    host: 127.0.0.1
    {{- end }}
  {{- toYaml .Values.livenessProbe | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
    {{- if eq $adminHost "127.0.0.1" }}
    host: 127.0.0.1
    {{- end }}
  {{- toYaml .Values.readinessProbe | nindent 2 }}
{{- with include "watchmux.resources" . | fromYaml }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $securityContext := .Values.securityContext }}
{{- if eq .Values.mode "sidecar" }}
{{- /* The application's pod sets the pod-level context: carry ours on the container. */}}
{{- $securityContext = merge (deepCopy .Values.securityContext) (pick .Values.podSecurityContext "runAsNonRoot" "runAsUser" "runAsGroup" "seccompProfile") }}
{{- end }}
securityContext:
  {{- toYaml $securityContext | nindent 2 }}
{{- with .Values.lifecycle }}
lifecycle:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $mounts := include "watchmux.volumeMounts" . | trim }}
{{- if $mounts }}
volumeMounts:
  {{- $mounts | nindent 2 }}
{{- end }}
{{- end }}

{{- define "watchmux.volumeMounts" -}}
{{- if include "watchmux.tlsActive" . }}
- name: tls
  mountPath: /etc/watchmux/tls
  readOnly: true
{{- end }}
{{- if .Values.upstream.kubeconfigSecret.name }}
- name: upstream-kubeconfig
  mountPath: /etc/watchmux/upstream
  readOnly: true
{{- end }}
{{- if include "watchmux.kubeletCredentials" . }}
{{- /* The kubelet's paths as they are on the host: the kubeconfig names its
certificate by an absolute path, and kubelet-client-current.pem is an absolute
symlink to the latest rotated certificate in the same directory. */}}
{{- if include "watchmux.tree" . }}
- name: tier-kubeconfig
  {{- /* the static pod's is a host file; the DaemonSet's a ConfigMap's directory */}}
  mountPath: {{ ternary (include "watchmux.treeKubeconfigPath" .) (include "watchmux.treeKubeconfigPath" . | dir) (eq (include "watchmux.staticPod" .) "true") }}
  readOnly: true
- name: tier-ca
  mountPath: {{ include "watchmux.treeCADir" . }}
  readOnly: true
{{- if include "watchmux.treeFallback" . }}
{{- /* the host file at its own path, as the kubelet's */}}
- name: fallback-ca
  mountPath: {{ .Values.nodeLocal.tier.fallback.caHostPath }}
  readOnly: true
{{- end }}
{{- else }}
- name: kubelet-kubeconfig
  mountPath: {{ .Values.nodeLocal.kubeletKubeconfig }}
  readOnly: true
{{- end }}
{{- with .Values.nodeLocal.kubeletPKIDir }}
- name: kubelet-pki
  mountPath: {{ . }}
  readOnly: true
{{- end }}
{{- end }}
{{- if include "watchmux.clientCAActive" . }}
- name: client-ca
  mountPath: /etc/watchmux/client-ca
  readOnly: true
{{- end }}
{{- if include "watchmux.persist" . }}
- name: persist
  mountPath: {{ .Values.nodeLocal.persist.hostPath }}
{{- end }}
{{- if include "watchmux.persistKey" . }}
- name: persist-key
  mountPath: /etc/watchmux/persist-key
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "watchmux.volumes" -}}
{{- if include "watchmux.tlsActive" . }}
- name: tls
  secret:
    secretName: {{ include "watchmux.tlsSecretName" . }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if .Values.upstream.kubeconfigSecret.name }}
- name: upstream-kubeconfig
  secret:
    secretName: {{ .Values.upstream.kubeconfigSecret.name }}
{{- end }}
{{- if include "watchmux.kubeletCredentials" . }}
{{- if include "watchmux.tree" . }}
- name: tier-kubeconfig
  configMap:
    name: {{ include "watchmux.fullname" . }}-tier-upstream
- name: tier-ca
  configMap:
    name: {{ .Values.nodeLocal.tier.caConfigMap }}
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
{{- end }}
{{- if include "watchmux.clientCAActive" . }}
- name: client-ca
  configMap:
    name: {{ .Values.auth.clientCA.configMap }}
{{- end }}
{{- if include "watchmux.persist" . }}
- name: persist
  hostPath:
    path: {{ .Values.nodeLocal.persist.hostPath }}
    type: DirectoryOrCreate
{{- end }}
{{- if include "watchmux.persistKey" . }}
- name: persist-key
  secret:
    secretName: {{ .Values.nodeLocal.persist.encryptionKey.secret }}
    defaultMode: 0400
    items:
      - key: {{ .Values.nodeLocal.persist.encryptionKey.key }}
        path: {{ .Values.nodeLocal.persist.encryptionKey.key }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Pod template of the DaemonSet and the Deployment. */}}
{{- define "watchmux.podTemplate" -}}
metadata:
  labels:
    {{- include "watchmux.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    kubectl.kubernetes.io/default-container: watchmux
    {{- if include "watchmux.tlsGenerated" . }}
    {{- include "watchmux.generateTLS" . }}
    checksum/tls: {{ .Values._watchmuxGeneratedTLS.crt | sha256sum }}
    {{- end }}
    {{- if include "watchmux.tree" . }}
    {{- /* watchmux reads its kubeconfig at start */}}
    checksum/tier-upstream: {{ include "watchmux.treeKubeconfig" . | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "watchmux.serviceAccountName" . }}
  {{- if include "watchmux.clientIdentity" . }}
  # watchmux acts upstream with the node's credentials and its clients' own:
  # it has no use for a service-account token.
  automountServiceAccountToken: false
  {{- else }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automount }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if eq .Values.mode "nodeLocal" }}
  hostNetwork: {{ .Values.nodeLocal.hostNetwork }}
  {{- if and (include "watchmux.tree" .) (include "watchmux.treeServerInCluster" .) }}
  # The tier by its Service name: cluster DNS.
  dnsPolicy: ClusterFirstWithHostNet
  {{- else if include "watchmux.kubeletCredentials" . }}
  # The node's resolver, as the kubelet's: its kubeconfig names the API server
  # by a name the node resolves, and cluster DNS may itself need kube-proxy.
  dnsPolicy: Default
  {{- else if .Values.nodeLocal.hostNetwork }}
  dnsPolicy: ClusterFirstWithHostNet
  {{- end }}
  {{- end }}
  {{- $priority := .Values.priorityClassName }}
  {{- if eq .Values.mode "nodeLocal" }}
  {{- $priority = default .Values.nodeLocal.priorityClassName $priority }}
  {{- else if eq .Values.mode "tier" }}
  {{- $priority = default .Values.tier.priorityClassName $priority }}
  {{- end }}
  {{- with $priority }}
  priorityClassName: {{ . }}
  {{- end }}
  terminationGracePeriodSeconds: {{ include "watchmux.terminationGrace" . }}
  {{- $podSecurityContext := .Values.podSecurityContext }}
  {{- if include "watchmux.kubeletCredentials" . }}
  {{- /* The kubelet's kubeconfig and keys are root's, mode 0600. uid 0 reads
  them as their owner; every capability stays dropped, so it reads nothing
  that root does not own, and the container sees only what is mounted. */}}
  {{- $podSecurityContext = deepCopy .Values.podSecurityContext }}
  {{- $_ := set $podSecurityContext "runAsUser" 0 }}
  {{- $_ = set $podSecurityContext "runAsGroup" 0 }}
  {{- $_ = set $podSecurityContext "runAsNonRoot" false }}
  {{- end }}
  securityContext:
    {{- toYaml $podSecurityContext | nindent 4 }}
  containers:
    - {{ include "watchmux.container" . | indent 6 | trim }}
  {{- $volumes := include "watchmux.volumes" . | trim }}
  {{- if $volumes }}
  volumes:
    {{- $volumes | nindent 4 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $tolerations := .Values.tolerations }}
  {{- if eq .Values.mode "nodeLocal" }}
  {{- $tolerations = concat .Values.nodeLocal.tolerations .Values.tolerations }}
  {{- end }}
  {{- with $tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if eq .Values.mode "tier" }}
  {{- if .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml .Values.topologySpreadConstraints | nindent 4 }}
  {{- else if or .Values.tier.spreadOverNodes .Values.tier.spreadOverZones }}
  topologySpreadConstraints:
    {{- range $key := list (and .Values.tier.spreadOverNodes "kubernetes.io/hostname") (and .Values.tier.spreadOverZones "topology.kubernetes.io/zone") }}
    {{- if $key }}
    - maxSkew: 1
      topologyKey: {{ $key }}
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "watchmux.selectorLabels" $ | nindent 10 }}
    {{- end }}
    {{- end }}
  {{- end }}
  {{- end }}
{{- end }}

{{/* Checks that cannot be said in values.schema.json. */}}
{{- define "watchmux.validate" -}}
{{- if not .Values.image.repository }}
{{- fail "image.repository is required: no watchmux image is published. Build one with `make image` in the watchmux repository (an OCI archive, .run/image/watchmux-oci.tar), push it to your registry (`crane push .run/image/oci REGISTRY/watchmux:TAG`, or `skopeo copy oci-archive:.run/image/watchmux-oci.tar docker://REGISTRY/watchmux:TAG`), then set image.repository=REGISTRY/watchmux and image.tag=TAG (or image.digest=sha256:...)" }}
{{- end }}
{{- if and .Values.certManager.enabled .Values.tls.existingSecret }}
{{- fail "certManager.enabled and tls.existingSecret are exclusive: pick one source for the serving certificate" }}
{{- end }}
{{- if and (not (kindIs "invalid" .Values.tier.pdb.minAvailable)) (not (kindIs "invalid" .Values.tier.pdb.maxUnavailable)) }}
{{- fail "tier.pdb: set minAvailable or maxUnavailable, not both (set the other to null)" }}
{{- end }}
{{- $authMode := include "watchmux.authMode" . }}
{{- if and (eq $authMode "delegated") (eq .Values.mode "nodeLocal") (not .Values.auth.clientCA.configMap) }}
{{- fail (printf "nodeLocal with delegated auth (the default) needs auth.clientCA.configMap: kubelets authenticate with their client certificates, which watchmux verifies against the cluster's client CA. Copy client-ca-file from kube-system's extension-apiserver-authentication ConfigMap into a ConfigMap in the release namespace: kubectl -n kube-system get configmap extension-apiserver-authentication -o jsonpath='{.data.client-ca-file}' >ca.crt && kubectl -n %s create configmap watchmux-client-ca --from-file=ca.crt; then set auth.clientCA.configMap=watchmux-client-ca (auth.clientCA.key: ca.crt)" .Release.Namespace) }}
{{- end }}
{{- if and (eq $authMode "delegated") .Values.auth.clientCA.configMap (not (include "watchmux.tlsActive" .)) }}
{{- fail "auth.clientCA.configMap (--client-ca-file) needs TLS on the listener: client certificates are only presented over TLS (tls.enabled, and not sidecar mode)" }}
{{- end }}
{{- if and (eq $authMode "trusted-local") .Values.auth.clientCA.configMap }}
{{- fail "auth.clientCA.configMap (--client-ca-file) is only for delegated auth; trusted-local does not authenticate clients" }}
{{- end }}
{{- if and .Values.upstream.apiserverPort (not .Values.upstream.apiserverHost) }}
{{- fail "upstream.apiserverPort needs upstream.apiserverHost" }}
{{- end }}
{{- with include "watchmux.upstreamKubeconfig" . }}
{{- if $.Values.upstream.apiserverHost }}
{{- fail (printf "upstream.apiserverHost sets KUBERNETES_SERVICE_HOST, which watchmux reads only without a kubeconfig; it is given --kubeconfig=%s, whose server is the API server it uses (with the kubelet's credentials: the kubelet's own API server address, so no kube-proxy loop). Leave upstream.apiserverHost empty" .) }}
{{- end }}
{{- end }}
{{- if include "watchmux.clientIdentity" . }}
{{- if or .Values.rbac.extraRules .Values.rbac.extraClusterRoles }}
{{- fail "rbac.extraRules and rbac.extraClusterRoles grant nothing in nodeLocal with delegated auth: watchmux acts upstream with the node's kubelet credentials (or upstream.kubeconfigSecret's) and its clients' own, never with its ServiceAccount, whose token the pod does not mount. Leave them empty" }}
{{- end }}
{{- end }}
{{- if and (include "watchmux.kubeletCredentials" .) .Values.cache.enabled }}
{{- $listable := include "watchmux.nodeListable" . | fromYaml }}
{{- $why := "in nodeLocal with delegated auth watchmux lists and watches with the node's kubelet credentials, and the Node authorizer lets a node list and watch only: pods and resourceslices.resource.k8s.io of its own node (spec.nodeName), its own nodes object (metadata.name), services, runtimeclasses.node.k8s.io, csidrivers.storage.k8s.io and certificatesigningrequests.certificates.k8s.io. Other resources a node may at most get one object at a time (configmaps, secrets and PVCs its pods use; endpoints); requests for them pass through with the caller's own credentials. cache.resources: null picks what a kubelet reads" }}
{{- if include "watchmux.cacheAll" . }}
{{- fail (printf `cache.resources "*" cannot be cached with a node's credentials: %s` $why) }}
{{- end }}
{{- $unlistable := list }}
{{- $scopes := include "watchmux.cacheScopes" . | fromYaml }}
{{- range $resource := include "watchmux.cachedResources" . | fromYamlArray }}
{{- if not (hasKey $listable $resource) }}
{{- $unlistable = append $unlistable $resource }}
{{- else if index $listable $resource }}
{{- $field := index $listable $resource }}
{{- $scope := index $scopes $resource | default "" }}
{{- if not (regexMatch (printf `(^|&)fieldSelector=([^&]*,)?%s==?\$\(NODE_NAME\)(,|&|$)` (regexQuoteMeta $field)) $scope) }}
{{- $fix := printf "Leave cache.scopes.%s out (the chart then scopes it to the node itself) or give it fieldSelector=%s=$(NODE_NAME), or leave %s out of cache.resources" $resource $field $resource }}
{{- if eq $resource "pods" }}
{{- $fix = printf "Keep nodeLocal.scopePodsToNode true and leave cache.scopes.pods out, or give cache.scopes.pods fieldSelector=spec.nodeName=$(NODE_NAME), or leave pods out of cache.resources" }}
{{- end }}
{{- fail (printf "cache %s: a node may list and watch %s only with fieldSelector=%s=<its own name>, and watchmux lists with the node's kubelet credentials here (nodeLocal with delegated auth). %s" $resource $resource $field $fix) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $unlistable }}
{{- fail (printf "cache.resources: %s cannot be cached with a node's credentials: %s" (join ", " .) $why) }}
{{- end }}
{{- end }}
{{- if .Values.cache.enabled }}
{{- $all := include "watchmux.cacheAll" . }}
{{- range $resource := keys .Values.cache.scopes | sortAlpha }}
{{- if not (include "watchmux.isCached" (list $ $resource)) }}
{{- fail (printf "cache.scopes.%s: %s is not cached (not in cache.resources, or turned off by cache.watchCacheSizes)" $resource $resource) }}
{{- end }}
{{- end }}
{{- if and (not $all) (not (include "watchmux.cachedResources" . | fromYamlArray)) }}
{{- fail "cache.watchCacheSizes turns off every resource in cache.resources: set cache.enabled=false instead" }}
{{- end }}
{{- end }}
{{- end }}
