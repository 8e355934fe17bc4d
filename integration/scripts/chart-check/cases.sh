# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); the cases every stage renders, the values the chart must refuse, and
# helpers to read rendered manifests.
# shellcheck shell=bash

# --- cases ---------------------------------------------------------------------
# name | namespace kind (restricted|privileged) | flags the binary lacks that the
# case passes on purpose (comma-separated, or -) | helm args
# nodeLocal defaults to delegated auth, which needs auth.clientCA.configMap.
examples="$chart/examples"
cases=(
  "tier|restricted|-|--set mode=tier"
  "tier-cache-all|restricted|-|--set mode=tier --set 'cache.resources={*}' --set cache.scopes.configmaps=labelSelector=app=demo --set limits.fairnessSeats=200 --set limits.fairnessQueueWait=5s --set limits.goawayChance=0.001 --set limits.maxConnectionAge=15m --set limits.maxConnectionAgeGrace=2m"
  "tier-cache-off|restricted|-|--set mode=tier --set cache.enabled=false"
  "tier-servicemonitor|restricted|-|--set mode=tier --set serviceMonitor.enabled=true --set networkPolicy.enabled=true"
  "nodelocal-fleet-relabelings|privileged|-|--set mode=nodeLocal --set serviceMonitor.enabled=true --set nodeLocal.adminOnHostIP=true --set auth.clientCA.configMap=client-ca -f $examples/fleet-metric-relabelings.yaml"
  "tier-certmanager|restricted|-|--set mode=tier --set certManager.enabled=true"
  "tier-plain-existing-issuer|restricted|-|--set mode=tier --set tls.enabled=false --set certManager.enabled=true --set certManager.issuerRef.name=corp-ca --set certManager.issuerRef.kind=ClusterIssuer"
  "tier-example-values|restricted|-|-f $examples/tier-values.yaml"
  "tier-several-servers|restricted|-|--set mode=tier --set 'upstream.servers={https://10.0.0.1:6443,https://10.0.0.2:6443,https://10.0.0.3:6443}'"
  "nodelocal-staticpod-several-servers|privileged|-|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set 'upstream.servers={https://10.0.0.1:6443,https://10.0.0.2:6443}'"
  "tier-scheduling-tuned|restricted|-|--set mode=tier --set tier.spreadOverZones=false --set priorityClassName=system-node-critical"
  "nodelocal|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.kubeletClient=true --set nodeLocal.allowKubeletOnDaemonSet=true"
  "nodelocal-staticpod|privileged|-|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca"
  "nodelocal-staticpod-own-tooling|privileged|-|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.staticPod.installer.enabled=false --set nodeLocal.staticPod.manifestDir=/var/lib/kubelet/manifests --set nodeLocal.staticPod.hostDir=/var/lib/watchmux --set nodeLocal.staticPod.fileName=wm.yaml --set image.digest=sha256:$(printf '%064d' 0)"
  "nodelocal-servicemonitor|privileged|-|--set mode=nodeLocal --set serviceMonitor.enabled=true --set admin.listenAddress='\$(HOST_IP)' --set auth.clientCA.configMap=client-ca"
  "nodelocal-certmanager|privileged|-|--set mode=nodeLocal --set certManager.enabled=true --set auth.clientCA.configMap=client-ca"
  "nodelocal-hostport|privileged|-|--set mode=nodeLocal --set nodeLocal.hostNetwork=false --set nodeLocal.hostIP=0.0.0.0 --set auth.clientCA.configMap=client-ca"
  "nodelocal-example-values|privileged|-|-f $examples/node-local-values.yaml"
  "nodelocal-cache-custom|privileged|-|--set mode=nodeLocal --set 'cache.resources={pods,nodes,leases.coordination.k8s.io,widgets.example.com}' --set 'cache.watchCacheSizes={nodes#0,pods#1000}' --set cache.warm=false --set cache.historyWindow=2m --set cache.slowWatcherGrace=10s --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true"
  "nodelocal-unscoped|privileged|-|--set mode=nodeLocal --set nodeLocal.scopePodsToNode=false --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true"
  "nodelocal-kubelet-custom|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set 'cache.resources={pods,nodes,services,resourceslices.resource.k8s.io,certificatesigningrequests.certificates.k8s.io}' --set 'cache.watchCacheSizes={services#0}' --set nodeLocal.kubeletKubeconfig=/var/lib/kubelet/kubeconfig --set nodeLocal.kubeletPKIDir= --set upstream.context=default"
  "nodelocal-kubeconfig-secret|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set upstream.kubeconfigSecret.name=watchmux-upstream"
  "sidecar|restricted|-|--set mode=sidecar"
  "sidecar-warm-scoped|restricted|-|--set mode=sidecar --set cache.warm=true --set 'cache.resources={pods}' --set cache.scopes.pods='fieldSelector=metadata.namespace=\$(POD_NAMESPACE)'"
  "sidecar-servicemonitor|restricted|-|--set mode=sidecar --set serviceMonitor.enabled=true"
  "sidecar-example-values|restricted|-|-f $examples/sidecar-values.yaml"
  "nodelocal-delegated-tuned|privileged|-|--set mode=nodeLocal --set auth.mode=delegated --set auth.clientCA.configMap=client-ca --set auth.anonymous=false --set auth.cacheTTL.token=1m --set auth.cacheTTL.tokenNegative=5s --set auth.cacheTTL.authorized=2m --set auth.cacheTTL.unauthorized=10s --set limits.maxRequestsInflight=800 --set limits.maxConnections=0 --set limits.maxRequestBodyBytes=1048576 --set limits.goawayChance=0.005"
  "nodelocal-trusted-local|privileged|-|--set mode=nodeLocal --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true --set 'rbac.extraClusterRoles[0]=system:node' --set upstream.apiserverHost=kubernetes.example --set upstream.apiserverPort=6443"
  "tier-trusted-local-remote|restricted|-|--set mode=tier --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true --set networkPolicy.enabled=true"
  "tier-delegated-client-ca|restricted|-|--set mode=tier --set auth.clientCA.configMap=client-ca"
  "tier-discover-servers|restricted|-|--set mode=tier --set upstream.discoverServers=true --set 'upstream.servers={https://lb.example:6443}'"
  "tier-monitoring|restricted|-|--set mode=tier --set serviceMonitor.enabled=true --set monitoring.dashboards.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.runbookBaseURL=https://runbooks.example/docs/runbooks.md"
  "nodelocal-metrics-on-host|privileged|-|--set mode=nodeLocal --set nodeLocal.adminOnHostIP=true --set serviceMonitor.enabled=true --set monitoring.dashboards.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.runbookBaseURL=https://runbooks.example/docs/runbooks.md --set auth.clientCA.configMap=client-ca"
  "nodelocal-tree|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.kubeletClient=true --set nodeLocal.allowKubeletOnDaemonSet=true --set nodeLocal.tier.server=https://watchmux-tier.watchmux.svc:443 --set nodeLocal.tier.caConfigMap=watchmux-tier-kubeconfig --set 'nodeLocal.tier.fallback.servers={https://10.0.0.1:6443,https://10.0.0.2:6443}' --set nodeLocal.tier.fallback.caHostPath=/etc/kubernetes/pki/ca.crt"
  "nodelocal-staticpod-tree|privileged|-|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://10.0.0.10:443 --set nodeLocal.tier.caConfigMap=watchmux-tier-kubeconfig --set nodeLocal.tier.tlsServerName=watchmux-tier.watchmux.svc --set 'nodeLocal.tier.fallback.servers={https://10.0.0.1:6443}' --set nodeLocal.tier.fallback.caHostPath=/etc/kubernetes/pki/ca.crt --set nodeLocal.tier.fallback.tlsServerName=kubernetes"
  "nodelocal-persist-key|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.persist.encryptionKey.secret=watchmux-persist-key"
  "nodelocal-staticpod-persist-key|privileged|-|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.persist.encryptionKey.secret=watchmux-persist-key --set nodeLocal.persist.encryptionKey.key=aes.key"
  "nodelocal-rollout-tuned|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.rollout.maxUnavailable=50 --set nodeLocal.rollout.minReadySeconds=0 --set resources.requests.memory=1Gi"
)
# Values the chart must refuse: name | helm args [| text the error must contain]
refusals=(
  "nodelocal-persist-key-without-persistence|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.persist.encryptionKey.secret=k --set 'nodeLocal.persist.resources=null'|nodeLocal.persist.encryptionKey.secret without persistence"
  "nodelocal-delegated-without-client-ca|--set mode=nodeLocal|nodeLocal with delegated auth (the default) needs auth.clientCA.configMap"
  "nodelocal-servicemonitor-loopback|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set serviceMonitor.enabled=true|set nodeLocal.adminOnHostIP=true"
  "client-ca-with-trusted-local|--set mode=tier --set auth.mode=trusted-local --set auth.clientCA.configMap=client-ca|only for delegated auth"
  "client-ca-without-tls|--set mode=tier --set tls.enabled=false --set auth.clientCA.configMap=client-ca|needs TLS on the listener"
  "upstream-servers-in-the-tree|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://10.0.0.10:443 --set nodeLocal.tier.caConfigMap=t --set 'upstream.servers={https://10.0.0.1:6443}'|in the tree (nodeLocal.tier.server) the upstream is the tier"
  "tree-fallback-without-tier|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set 'nodeLocal.tier.fallback.servers={https://10.0.0.1:6443}' --set nodeLocal.tier.fallback.caHostPath=/ca.crt|without a tier, list API servers in upstream.servers"
  "tree-fallback-without-ca|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://10.0.0.10:443 --set nodeLocal.tier.caConfigMap=t --set 'nodeLocal.tier.fallback.servers={https://10.0.0.1:6443}'|needs nodeLocal.tier.fallback.caHostPath"
  "discover-servers-with-kubelet-credentials|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set upstream.discoverServers=true|a node may not list EndpointSlices"
  "discover-servers-in-the-tree|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://10.0.0.10:443 --set nodeLocal.tier.caConfigMap=t --set upstream.discoverServers=true|list them in nodeLocal.tier.fallback.servers"
  "upstream-servers-not-urls|--set mode=tier --set 'upstream.servers={10.0.0.1:6443}'"
  "auth-bad-mode|--set auth.mode=open"
  "auth-bad-ttl|--set auth.cacheTTL.token=1d"
  "limits-negative|--set limits.maxConnections=-1"
  "goaway-chance-past-cap|--set mode=tier --set limits.goawayChance=0.05|--goaway-chance can not be less than 0 or greater than 0.02"
  "goaway-chance-negative|--set-json limits.goawayChance=-0.001"
  "goaway-chance-not-a-number|--set limits.goawayChance=often"
  "max-connection-age-not-a-duration|--set limits.maxConnectionAge=soon"
  "unknown-mode|--set mode=daemon"
  "unknown-key|--set replicas=3"
  "certmanager-and-existing-secret|--set certManager.enabled=true --set tls.existingSecret=mine"
  "pdb-both-bounds|--set tier.pdb.minAvailable=1"
  "bad-duration|--set shutdownGrace=3days"
  "cache-bad-resource|--set 'cache.resources={pods/log}'"
  "cache-no-resources|--set 'cache.resources={}'"
  "cache-bad-warm|--set cache.warm=sometimes"
  "cache-bad-size|--set 'cache.watchCacheSizes={pods=0}'"
  "cache-bad-window|--set cache.historyWindow=1d"
  "cache-bad-scope|--set cache.scopes.pods=nodeName=node-1"
  "cache-scope-not-cached|--set cache.scopes.secrets=labelSelector=app=demo"
  "cache-all-turned-off|--set 'cache.resources={pods}' --set 'cache.watchCacheSizes={pods#0}'"
  "image-repository-unset|--set image.repository=|image.repository is required: no watchmux image is published"
  "nodelocal-kubelet-cache-all|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set 'cache.resources={*}'|cache.resources \"*\" cannot be cached with a node's credentials"
  "nodelocal-kubelet-unlistable|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set 'cache.resources={pods,configmaps,endpoints,namespaces,endpointslices.discovery.k8s.io}'|configmaps, endpoints, namespaces, endpointslices.discovery.k8s.io cannot be cached with a node's credentials"
  "nodelocal-kubelet-pods-unscoped|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.scopePodsToNode=false|a node may list and watch pods only with fieldSelector=spec.nodeName"
  "nodelocal-kubelet-nodes-scope|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set cache.scopes.nodes=labelSelector=a=b|a node may list and watch nodes only with fieldSelector=metadata.name"
  "nodelocal-kubelet-extra-rbac|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set 'rbac.extraClusterRoles[0]=system:node'|grant nothing in nodeLocal with delegated auth"
  "nodelocal-kubelet-apiserver-host|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set upstream.apiserverHost=kubernetes.example|which watchmux reads only without a kubeconfig"
  "nodelocal-kubelet-relative-path|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.kubeletKubeconfig=kubelet.conf"
  "nodelocal-kubelet-on-daemonset|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.kubeletClient=true|the kubelet's only way to the API would be a DaemonSet pod"
  "staticpod-trusted-local|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true|nodeLocal.mode staticPod needs delegated auth with the kubelet's credentials"
  "staticpod-kubeconfig-secret|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set upstream.kubeconfigSecret.name=watchmux-upstream|a static pod cannot mount a Secret"
  "staticpod-hostport|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.hostNetwork=false|needs nodeLocal.hostNetwork=true"
  "staticpod-configmap-volume|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set extraVolumes[0].name=extra --set extraVolumes[0].configMap.name=extra|takes only hostPath volumes"
  "staticpod-secret-env|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set extraEnv[0].name=X --set extraEnv[0].valueFrom.secretKeyRef.name=s --set extraEnv[0].valueFrom.secretKeyRef.key=k|cannot read a Secret or ConfigMap"
  "staticpod-pull-always|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set image.pullPolicy=Always|with image.pullPolicy Always"
  "staticpod-dot-file|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.staticPod.fileName=.watchmux.yaml"
  "kubelet-daemonset-rolling|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.kubeletClient=true --set nodeLocal.allowKubeletOnDaemonSet=true --set nodeLocal.updateStrategy.type=RollingUpdate|cannot reach the API to learn of the replacement"
  "rollout-zero|--set nodeLocal.rollout.maxUnavailable=0"
  "installer-third-party-image|--set nodeLocal.staticPod.installer.image=busybox:1.37"
  "installer-own-min-ready|--set nodeLocal.staticPod.installer.minReadySeconds=30"
  "alerts-without-runbooks|--set monitoring.prometheusRule.enabled=true|monitoring.prometheusRule.runbookBaseURL is required"
  "tree-without-ca|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://watchmux-tier.watchmux.svc:443|needs nodeLocal.tier.caConfigMap"
  "tree-plain-http|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=http://watchmux-tier.watchmux.svc:443 --set nodeLocal.tier.caConfigMap=x|the tier is reached over TLS"
  "tree-staticpod-service-name|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://watchmux-tier.watchmux.svc:443 --set nodeLocal.tier.caConfigMap=x|starts before cluster DNS and kube-proxy"
  "tree-trusted-local|--set mode=nodeLocal --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true --set nodeLocal.tier.server=https://watchmux-tier:443 --set nodeLocal.tier.caConfigMap=x|needs delegated auth with the kubelet's credentials"
  "tree-inline-kubelet-certificate|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://watchmux-tier:443 --set nodeLocal.tier.caConfigMap=x --set nodeLocal.kubeletPKIDir=|needs nodeLocal.kubeletPKIDir"
)

ns_restricted="watchmux-chart-check-r-$$"
ns_privileged="watchmux-chart-check-p-$$"
ns_for() { if [[ $1 == privileged ]]; then echo "$ns_privileged"; else echo "$ns_restricted"; fi; }

# Splits a multi-document YAML file into $2/NNN.yaml, one object each (helm
# output separates documents with lines that are exactly "---").
split_docs() {
  mkdir -p "$2"
  awk -v dir="$2" '
    function next_file() { n++; f = sprintf("%s/%03d.yaml", dir, n) }
    BEGIN { n = 0; next_file() }
    /^---[[:space:]]*$/ { close(f); next_file(); next }
    { print > f }
  ' "$1"
  local f
  for f in "$2"/*.yaml; do
    grep -q '^kind:' "$f" 2>/dev/null || rm -f "$f"
  done
}
doc_field() { awk -v k="$1" '$1 == k":" { print $2; exit }' "$2"; }
doc_name() { awk '/^metadata:/ { m = 1; next } m && /^  name:/ { print $2; exit } m && /^[^ ]/ { m = 0 }' "$1"; }
