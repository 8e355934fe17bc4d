#!/usr/bin/env bash
# Checks the Helm chart charts/watchmux and the deployment examples.
#
#   integration/scripts/chart-check.sh [KUBECONFIG]
#
# Always (offline):
#   - helm lint --strict, and helm template, for every case below (each mode;
#     ServiceMonitor on; cert-manager on; the example values files);
#   - values the chart must refuse (schema and template checks) are refused,
#     among them no image.repository (nothing is published: every other case
#     renders with a placeholder registry.example/watchmux);
#   - monitoring: nodeLocal's admin port is loopback unless
#     nodeLocal.adminOnHostIP binds it on $(HOST_IP) (probes follow), a
#     ServiceMonitor it could not scrape is refused, the dashboard ConfigMap and
#     PrometheusRule render (promtool and the queries: monitoring-check.sh);
#   - every --flag the chart passes is one `watchmux --help` lists (a case may
#     name flags it passes on purpose that the binary lacks; none do today);
#   - auth: --auth-mode is always rendered, delegated by default in nodeLocal
#     and tier, trusted-local in sidecar; nodeLocal+delegated without
#     auth.clientCA is refused with instructions;
#   - identity and RBAC per mode: tier/sidecar delegated get TokenReview/
#     SubjectAccessReview/impersonate RBAC; trusted-local never impersonate;
#     nodeLocal+delegated renders --upstream-identity=client, no ClusterRole,
#     Role or binding at all, no service-account token in the pod, and (with
#     the kubelet's credentials) --kubeconfig=<the kubelet's kubeconfig> from
#     read-only hostPath mounts at the host's paths, caching only what the
#     Node authorizer lets a node list and watch (anything else is refused);
#   - the cache: the chart's default cache.resources (tier) is the binary's own
#     --cache-resources default and the chart's built-in API groups are the
#     binary's; per case, the ClusterRole grants get/list/watch on every cached
#     resource and nothing more (list/watch only for "*"; CRD get only for
#     custom resources or "*"), --cache-warm is on where expected, nodeLocal
#     scopes pods to $(NODE_NAME), every $(VAR) in args is in the container's
#     env (so the kubelet expands it), readiness is /readyz and liveness /livez;
#   - the chart-generated serving certificate verifies against its CA and
#     carries the expected names;
#   - charts/watchmux/examples/sidecar-rendered.yaml is what the chart renders
#     now (CHART_CHECK_UPDATE=1 rewrites it), and the sidecar container in
#     sidecar-app.yaml is the chart's;
#   - examples/kubelet-kubeconfig.yaml parses as a kubeconfig, and is the
#     one the static-pod installer writes for the kubelet;
#   - nodeLocal.mode staticPod: the Pod manifest (ConfigMap *-static-pod)
#     names no ServiceAccount, Secret or ConfigMap, mounts host paths only
#     (the documented layout), runs the chart's image with delegated auth,
#     --upstream-identity=client and the kubelet's kubeconfig on the node's
#     loopback, with system-node-critical priority, and passes the kubelet's
#     own manifest checks (integration/cmd/staticpodcheck, which also refuses
#     it with a ServiceAccount added); no watchmux DaemonSet; the installer
#     DaemonSet (or none, installer.enabled=false) writes the file where the
#     kubelet reads it; kubelet-watchmux.conf parses; the kubelet's only API
#     path on a DaemonSet is refused unless acknowledged
#     (nodeLocal.allowKubeletOnDaemonSet);
#   - the installer is the watchmux image itself (`watchmux install-static-pod`,
#     no other image in any rendered case), fed by a projected volume that
#     lays out every host file the static pod mounts: the real binary's
#     installer, run against a scratch host with the files as the pod would
#     mount them, installs, re-runs without writing, upgrades keeping the
#     previous manifest outside the manifest directory, and rolls back;
#   - no rendered object has a duplicate key (a YAML mapping that names a key
#     twice: the API server keeps one silently);
#   - NOTES (helm install --dry-run=client) for nodeLocal with the kubelet's
#     credentials say a certificate rotation needs no restart, and tell no
#     one to crictl stop;
#   - rollout: the DaemonSet form rolls (RollingUpdate) unless the kubelet is
#     its client (OnDelete; RollingUpdate refused there), both it and the
#     installer take nodeLocal.rollout's maxUnavailable and minReadySeconds,
#     and with the defaults a 5,000-node rollout finishes within the hour even
#     when every node takes its worst case (the arithmetic in
#     docs/node-local.md, "Rollout speed");
#   - resources: each mode's defaults (tier.resources, nodeLocal.resources,
#     sidecar.resources) are what the container gets, the top-level
#     resources overrides them, and they are the chart README's sizing table;
#   - the tree (nodeLocal.tier.server): watchmux's --kubeconfig is the chart's
#     tree kubeconfig (the tier, its CA, the kubelet's own certificate), in a
#     ConfigMap for the DaemonSet and a host file the installer writes for
#     the static pod; the kubelet's kubeconfig is not mounted; it takes
#     watch-lists (--upstream-watch-list), and no other case does; its refusals
#     (no CA, not https, a Service name for the static pod, not delegated
#     with the kubelet's credentials).
# With a kubeconfig (the test cluster's .run/kubeconfig, a real kube-apiserver):
#   - every rendered manifest (and the static pod manifest, as a Pod) and
#     every example manifest goes through
#     `kubectl apply --dry-run=server --warnings-as-errors` in scratch
#     namespaces this script creates (Pod Security "restricted" enforced and
#     warned for tier/sidecar, "privileged" for the hostNetwork DaemonSet) and
#     deletes again; kinds whose API is not served (ServiceMonitor,
#     cert-manager's Certificate/Issuer without their CRDs) are skipped with a
#     note;
#   - the Node authorizer, asked with a node client certificate minted from the
#     test cluster's CA, lets a node list and watch exactly what the chart's
#     node-listable table says (with the node's own name where it says so,
#     and not without it), and not the binary's other default resources;
#   - end to end, for nodeLocal (DaemonSet and static pod), tier and sidecar:
#     the watchmux binary started
#     with the rendered args (addresses and file paths made local, $(VAR)s
#     expanded as the kubelet does) and the rendered certificate gets ready
#     (with --cache-warm: its caches synced) and answers kubectl using the
#     rendered client kubeconfig (delegated: with a real token; for nodeLocal
#     the kubelet kubeconfig, and as upstream credentials the "kubelet's
#     kubeconfig", both with client certificates of node $node_a minted from
#     the test cluster's CA, --client-ca-file being the API server's client
#     CA); pod lists are served from the cache, and the nodeLocal cache holds
#     only the pods of its own node (two scratch pods bound to two made-up
#     nodes); nodeLocal: a pass-through the node may not do (list secrets) is
#     the same 403 through watchmux as directly, and another node's
#     certificate is refused on pass-through;
#   - the tree end to end: a tier watchmux (the chart's tier args, delegated
#     with the API server's client CA) and a nodeLocal watchmux whose
#     upstream is the chart's tree kubeconfig pointed at that tier, with a
#     node's client certificate: the node-local gets ready through the tier,
#     answers the "kubelet" with its own node's pods from its cache, the
#     tier holds the node-local's watches and answered its lists from its
#     cache, and a pass-through the node may not do is the API server's own
#     403 (the tier impersonates the node);
#   - a real install + upgrade (nodeLocal) shows the generated CA and serving
#     certificate are kept across upgrades, and the CA Secret across uninstall;
#     installed nodeLocal (delegated) binds its ServiceAccount to nothing;
#     upgraded to tier, the release's ServiceAccount (a token from the
#     TokenRequest API) is enough for watchmux to warm every cache, with the
#     default resources and with "*", and may not read what is not cached.
#
# Helm comes from integration/tools/helm (build-helm.sh), kubectl from
# .run/kubectl (build-k8s.sh; override with KUBECTL). Exits non-zero on any
# failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
chart="$root/charts/watchmux"
kubeconfig="${1:-}"

bash "$scripts/build-helm.sh" >&2
helm="$root/.run/helm"
kubectl="${KUBECTL:-$root/.run/kubectl}"

tmp="$(mktemp -d)"
# No image is published, so the chart renders only with image.repository
# set: every render, lint, install and upgrade below gets a placeholder one
# first (a case's own -f or --set still wins); the refusal
# image-repository-unset proves the chart refuses without it.
printf 'image:\n  repository: registry.example/watchmux\n' >"$tmp/image-values.yaml"
cat >"$tmp/helm" <<EOF
#!/usr/bin/env bash
case "\$1" in
  template|lint|install|upgrade) sub="\$1"; shift; exec "$helm" "\$sub" -f "$tmp/image-values.yaml" "\$@" ;;
esac
exec "$helm" "\$@"
EOF
chmod +x "$tmp/helm"
helm="$tmp/helm"
failures=0
namespaces=()
say() { echo "chart-check: $*"; }
fail() { echo "chart-check: FAIL: $*" >&2; failures=$((failures + 1)); }
note() { echo "chart-check: note: $*"; }

proxy_pid=""
tier_pid=""  # the tree's tier watchmux, while the node-local one runs against it
rel=""
rel_installed=0
scratch_pods=0
cleanup() {
  if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; fi
  if [[ -n $tier_pid ]]; then kill "$tier_pid" 2>/dev/null || true; wait "$tier_pid" 2>/dev/null || true; fi
  # Pods bound to a node are only deleted at once with --force; without a
  # namespace controller they would outlive their namespace.
  if [[ $scratch_pods == 1 ]]; then delete_scratch_pods || true; fi
  # A release left by a run that stopped half-way (its ClusterRoles are not
  # removed with the namespace).
  if [[ $rel_installed == 1 ]]; then "$helm" uninstall "$rel" --kubeconfig "$kubeconfig" -n "$ns_privileged" >/dev/null 2>&1 || true; fi
  if [[ ${#namespaces[@]} -gt 0 ]]; then delete_namespaces "${namespaces[@]}" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- cases ---------------------------------------------------------------------
# name | namespace kind (restricted|privileged) | flags the binary lacks that the
# case passes on purpose (comma-separated, or -) | helm args
# nodeLocal defaults to delegated auth, which needs auth.clientCA.configMap.
examples="$chart/examples"
cases=(
  "tier|restricted|-|--set mode=tier"
  "tier-cache-all|restricted|-|--set mode=tier --set 'cache.resources={*}' --set cache.scopes.configmaps=labelSelector=app=demo --set limits.fairnessSeats=200 --set limits.fairnessQueueWait=5s"
  "tier-cache-off|restricted|-|--set mode=tier --set cache.enabled=false"
  "tier-servicemonitor|restricted|-|--set mode=tier --set serviceMonitor.enabled=true --set networkPolicy.enabled=true"
  "tier-certmanager|restricted|-|--set mode=tier --set certManager.enabled=true"
  "tier-plain-existing-issuer|restricted|-|--set mode=tier --set tls.enabled=false --set certManager.enabled=true --set certManager.issuerRef.name=corp-ca --set certManager.issuerRef.kind=ClusterIssuer"
  "tier-example-values|restricted|-|-f $examples/tier-values.yaml"
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
  "nodelocal-delegated-tuned|privileged|-|--set mode=nodeLocal --set auth.mode=delegated --set auth.clientCA.configMap=client-ca --set auth.anonymous=false --set auth.cacheTTL.token=1m --set auth.cacheTTL.tokenNegative=5s --set auth.cacheTTL.authorized=2m --set auth.cacheTTL.unauthorized=10s --set limits.maxRequestsInflight=800 --set limits.maxConnections=0 --set limits.maxRequestBodyBytes=1048576"
  "nodelocal-trusted-local|privileged|-|--set mode=nodeLocal --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true --set 'rbac.extraClusterRoles[0]=system:node' --set upstream.apiserverHost=kubernetes.example --set upstream.apiserverPort=6443"
  "tier-trusted-local-remote|restricted|-|--set mode=tier --set auth.mode=trusted-local --set auth.allowUnauthenticatedRemote=true --set networkPolicy.enabled=true"
  "tier-delegated-client-ca|restricted|-|--set mode=tier --set auth.clientCA.configMap=client-ca"
  "tier-monitoring|restricted|-|--set mode=tier --set serviceMonitor.enabled=true --set monitoring.dashboards.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.runbookBaseURL=https://runbooks.example/docs/runbooks.md"
  "nodelocal-metrics-on-host|privileged|-|--set mode=nodeLocal --set nodeLocal.adminOnHostIP=true --set serviceMonitor.enabled=true --set monitoring.dashboards.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.runbookBaseURL=https://runbooks.example/docs/runbooks.md --set auth.clientCA.configMap=client-ca"
  "nodelocal-tree|privileged|-|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca --set nodeLocal.kubeletClient=true --set nodeLocal.allowKubeletOnDaemonSet=true --set nodeLocal.tier.server=https://watchmux-tier.watchmux.svc:443 --set nodeLocal.tier.caConfigMap=watchmux-tier-kubeconfig"
  "nodelocal-staticpod-tree|privileged|-|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca --set nodeLocal.tier.server=https://10.0.0.10:443 --set nodeLocal.tier.caConfigMap=watchmux-tier-kubeconfig --set nodeLocal.tier.tlsServerName=watchmux-tier.watchmux.svc"
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
  "auth-bad-mode|--set auth.mode=open"
  "auth-bad-ttl|--set auth.cacheTTL.token=1d"
  "limits-negative|--set limits.maxConnections=-1"
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

# --- the binary's flags --------------------------------------------------------
watchmux_bin="${WATCHMUX_BIN:-}"
if [[ -z $watchmux_bin ]]; then
  # The newer build: a release binary left from an earlier make release may
  # predate the source (and its flags) that make test just built in debug.
  for b in "$root/target/release/watchmux" "$root/target/debug/watchmux"; do
    [[ -x $b ]] || continue
    if [[ -z $watchmux_bin || $b -nt $watchmux_bin ]]; then watchmux_bin="$b"; fi
  done
fi
binary_flags=""
if [[ -n $watchmux_bin ]]; then
  binary_flags="$("$watchmux_bin" --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u)"
  # and the static-pod installer's (`watchmux install-static-pod`, whose usage
  # names them; its exact arguments are checked with the static pod below)
  installer_usage="$("$watchmux_bin" install-static-pod --help 2>&1 || true)"
  binary_flags="$( { echo "$binary_flags"; grep 'usage: watchmux install-static-pod' <<<"$installer_usage" |
    grep -oE -- '--[a-z0-9][a-z0-9-]*' || true; } | sort -u)"
else
  note "no watchmux binary (target/{release,debug}/watchmux or WATCHMUX_BIN): flag check skipped"
fi
check_flags() {  # check_flags <case> <file> [flags exempt, comma-separated]
  [[ -n $binary_flags ]] || return 0
  local flag bad=0 exempt=",${3:-},"
  while read -r flag; do
    [[ -z $flag ]] && continue
    [[ $exempt == *",$flag,"* ]] && continue
    if ! grep -qx -- "$flag" <<<"$binary_flags"; then
      fail "$1: passes $flag, which \`watchmux --help\` does not list"
      bad=1
    fi
  done < <(grep -oE -- '^[[:space:]]*- "?--[a-z0-9][a-z0-9-]*' "$2" | grep -oE -- '--[a-z0-9-]+' | sort -u)
  return $bad
}

# --- offline: lint, template, flags --------------------------------------------
say "helm $("$helm" version --template '{{.Version}}'), chart $chart"
for c in "${cases[@]}"; do
  IFS='|' read -r name nskind future args <<<"$c"
  eval "set -- $args"
  if ! "$helm" lint --strict --quiet "$chart" "$@" >"$tmp/lint-$name.log" 2>&1; then
    cat "$tmp/lint-$name.log" >&2; fail "$name: helm lint --strict"
  fi
  if ! "$helm" template watchmux "$chart" -n "$(ns_for "$nskind")" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err"; then
    cat "$tmp/$name.err" >&2; fail "$name: helm template"; continue
  fi
  kinds="$(grep -E '^kind:' "$tmp/$name.yaml" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s", sep, ($1 > 1 ? $1 "x" : "") $2; sep=", "}')"
  [[ $future == - ]] || note "$name: passes the not-yet-implemented ${future//,/ } on purpose; not checked against the binary"
  if check_flags "$name" "$tmp/$name.yaml" "$future"; then
    say "ok   template $name: $kinds"
  fi
done

# --- offline: monitoring ------------------------------------------------------------
# nodeLocal with hostNetwork binds the admin port on the node's IP only when
# asked (then its probes go to the pod IP, which is the node's); the
# dashboard and the rules render where asked. monitoring-check.sh checks the
# rules with promtool and the dashboard's queries.
if [[ -f $tmp/nodelocal-metrics-on-host.yaml && -f $tmp/nodelocal.yaml ]]; then
  admin_of() { yq -r 'select(.kind == "DaemonSet") | .spec.template.spec.containers[] | select(.name == "watchmux") | (.args[] | select(startswith("--admin-listen="))), ([.livenessProbe.httpGet.host, .readinessProbe.httpGet.host] | map(. // "pod-ip") | join(","))' "$1" | paste -sd' ' -; }
  on_host="$(admin_of "$tmp/nodelocal-metrics-on-host.yaml")"
  loopback="$(admin_of "$tmp/nodelocal.yaml")"
  if [[ $on_host == '--admin-listen=$(HOST_IP):9444 pod-ip,pod-ip' && $loopback == '--admin-listen=127.0.0.1:9444 127.0.0.1,127.0.0.1' ]]; then
    say "ok   nodeLocal admin port: loopback by default, \$(HOST_IP) with nodeLocal.adminOnHostIP (probes follow)"
  else
    fail "nodeLocal admin port: default '$loopback', with adminOnHostIP '$on_host'"
  fi
  for kind in ServiceMonitor PrometheusRule ConfigMap; do
    grep -q "^kind: $kind" "$tmp/nodelocal-metrics-on-host.yaml" || fail "nodelocal-metrics-on-host: no $kind rendered"
  done
fi

# --- offline: the cache ----------------------------------------------------------
# The chart's default list (cache.resources null, in tier) is the binary's
# default, and the API groups the chart treats as built in (no CRD to read)
# are the binary's.
if [[ -n $watchmux_bin ]]; then
  binary_default="$("$watchmux_bin" --help | tr -s ' \n' ' ' | sed -nE 's/.*--cache-resources <LIST> .*\[default: ([^]]*)\] --watch-cache-sizes.*/\1/p' | tr -d ' ')"
  chart_default="$(yq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0].args[] | select(startswith("--cache-resources=")) | ltrimstr("--cache-resources=")' "$tmp/tier.yaml")"
  if [[ $(yq -r '.cache.resources' "$chart/values.yaml") != null ]]; then
    fail "values.yaml cache.resources is not null (the mode's default)"
  elif [[ -n $binary_default && $binary_default == "$chart_default" ]]; then
    say "ok   cache.resources defaults (tier) to the binary's --cache-resources default ($binary_default)"
  else
    fail "the chart's default cache.resources in tier ($chart_default) is not the binary's --cache-resources default (${binary_default:-not found in --help})"
  fi
fi
builtin_src="$root/src/cache/resource_info.rs"
chart_builtin="$(grep -A1 'define "watchmux.builtinGroups"' "$chart/templates/_helpers.tpl" | tail -1 | grep -oE '"[^"]*"' | tr -d '"' | sort | paste -sd, -)"
if [[ -f $builtin_src ]]; then
  binary_builtin="$(awk '/const BUILTIN: &\[&str\] = &\[/ { on = 1; next } on && /\];/ { exit } on' "$builtin_src" | grep -oE '"[^"]*"' | tr -d '"' | sort | paste -sd, -)"
  if [[ -n $binary_builtin && $binary_builtin == "$chart_builtin" ]]; then
    say "ok   the chart's built-in API groups are the binary's (src/cache/resource_info.rs)"
  else
    fail "watchmux.builtinGroups in _helpers.tpl ($chart_builtin) differs from BUILTIN in src/cache/resource_info.rs ($binary_builtin)"
  fi
else
  note "no $builtin_src: built-in API groups not compared"
fi
builtin_json="$(tr ',' '\n' <<<"$chart_builtin" | jq -R . | jq -sc .)"
# What the chart says a node may list and watch: resource[.group] -> the field
# that must select the node itself ("" for none). The server-side checks ask
# the API server whether it is so.
node_listable_json="$(grep -A1 'define "watchmux.nodeListable"' "$chart/templates/_helpers.tpl" | tail -1 | grep -oE '"[^"]*"' | jq -sc '[range(0; length; 2) as $i | {key: .[$i], value: .[$i + 1]}] | from_entries')"

# The watchmux container of a rendered case, as JSON (the workload's, or in
# sidecar mode the snippet in the client ConfigMap), and the mode it runs in.
# nodeLocal.mode staticPod: the Pod manifest in ConfigMap <fullname>-static-pod.
static_pod_json() {  # <file> -> the static pod as JSON, or nothing
  yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data | to_entries[]
    | select(.key | test("\\.(yaml|yml|json)$")) | .value' "$1" | yq -c 'select(.kind == "Pod")'
}
container_json() {  # <file> -> "mode<TAB>json"
  local c
  c="$(static_pod_json "$1" | jq -c '.spec.containers[] | select(.name == "watchmux")')"
  if [[ -n $c ]]; then printf 'nodeLocal\t%s\n' "$c"; return; fi
  c="$(yq -c 'select(.kind == "DaemonSet" or .kind == "Deployment") | [.kind, (.spec.template.spec.containers[] | select(.name == "watchmux"))]' "$1")"
  if [[ -n $c ]]; then
    jq -r '[(if .[0] == "DaemonSet" then "nodeLocal" else "tier" end), (.[1] | tojson)] | @tsv' <<<"$c"
  else
    c="$(yq -r 'select(.kind == "ConfigMap") | .data["watchmux-container.yaml"] // empty' "$1" | yq -c .)"
    [[ -n $c ]] && printf 'sidecar\t%s\n' "$c"
  fi
}
# jq: the problems with one case's cache flags, ClusterRole and probes, one per line.
# shellcheck disable=SC2016 # a jq program, not shell
cache_jq='
  def inarr($x): any(.[]; . == $x or . == "*");
  def gr: (index(".")) as $i | if $i == null then {g: "", r: .} else {g: .[$i + 1:], r: .[:$i]} end;
  def allows($g; $r; $v; $name):
    any($rules[]; (.apiGroups // [] | inarr($g)) and (.resources // [] | inarr($r)) and (.verbs // [] | inarr($v))
      and (.resourceNames == null or ($name != null and (.resourceNames | index([$name]) != null))));
  def values($f): [$c.args[] | select(startswith($f + "=")) | .[($f | length) + 1:]];
  (values("--cache-resources")) as $cr
  | if ($cr | length) != 1 then "expected one --cache-resources, got \($cr | length)" else
    ($cr[0] | split(",") | map(select(. != ""))) as $res
    | ([values("--watch-cache-sizes")[] | split(",")[] | select(endswith("#0")) | rtrimstr("#0")]) as $off
    | ($res | index(["*"]) != null) as $all
    | ([$res[] | select(. != "*") | select(. as $r | $off | index([$r]) == null)]) as $cached
    | ([$cached[] | select((gr.g) as $g | $builtin | index([$g]) == null)]) as $custom
    | ([values("--cache-scope")[] | capture("^(?<r>[^=]+)=(?<s>.*)$")]) as $scopes
    | def cached($r): ($cached | index([$r]) != null) or ($all and ($off | index([$r]) == null));
      if $clientid then
      # nodeLocal+delegated: no RBAC at all (watchmux uses the node credentials)
      (select(($rules | length) > 0) | "nodeLocal with delegated auth renders ClusterRole rules: \($rules | map("\(.verbs | join("/")) \(.resources | join(","))") | join("; "))"),
      (if $kubelet then
        # kubelet credentials: only what a node may list and watch, its own objects where it must
        (select($all) | "cache.resources * with the kubelet'"'"'s credentials"),
        ($cached[] | select($listable[.] == null) | "\(.) is cached, but a node may not list and watch it (Node authorizer)"),
        ($cached[] | . as $r | ($listable[$r] // "") as $f | select($f != "")
          | select([$scopes[] | select(.r == $r and (.s | test("(^|&)fieldSelector=([^&]*,)?" + ($f | gsub("\\."; "\\.")) + "==?\\$\\(NODE_NAME\\)(,|&|$)")))] | length != 1)
          | "\($r) is cached without --cache-scope=\($r)=fieldSelector=\($f)=$(NODE_NAME): a node may list only its own")
      else empty end)
      else
      # every cached resource can be read
      ($cached[] | . as $n | gr as $x | ("get", "list", "watch") as $v
        | select(allows($x.g; $x.r; $v; null) | not) | "ClusterRole lacks \($v) on \($n)"),
      (if $all then
        (("list", "watch") as $v | select(allows("example.com"; "widgets"; $v; null) | not) | "cache.resources * but no \($v) on *"),
        (select(allows(""; "nodes/proxy"; "get"; null)) | "cache.resources * grants get on subresources (nodes/proxy)")
      else empty end),
      # the CRDs of custom resources, and only then
      (if $all then
        select(allows("apiextensions.k8s.io"; "customresourcedefinitions"; "get"; "widgets.example.com") | not) | "cache.resources * but no get on customresourcedefinitions"
      else
        ($custom[] | select(allows("apiextensions.k8s.io"; "customresourcedefinitions"; "get"; .) | not) | "no get on customresourcedefinitions/\(.)"),
        (select(($custom | length) == 0 and allows("apiextensions.k8s.io"; "customresourcedefinitions"; "get"; "x.example.com")) | "get on customresourcedefinitions without custom resources")
      end),
      # nothing else (the delegated-auth reviews and impersonation aside)
      ($rules[] | . as $rule | .apiGroups[] as $g | .resources[] as $r
        | (if $g == "" then $r else "\($r).\($g)" end) as $n
        | select(
            (($g == "*" or $r == "*") and $all and ($rule.verbs - ["list", "watch"] | length) == 0) or
            ($delegated and $g == "authentication.k8s.io" and $r == "*" and $rule.verbs == ["impersonate"]
              and $rule.resourceNames == null) or
            (($cached | index([$n]) != null) and ($rule.verbs - ["get", "list", "watch"] | length) == 0 and $rule.resourceNames == null) or
            ($n == "customresourcedefinitions.apiextensions.k8s.io" and $rule.verbs == ["get"]
              and (($all and $rule.resourceNames == null) or (($custom | length) > 0 and $rule.resourceNames == $custom))) or
            ($delegated and ($n == "tokenreviews.authentication.k8s.io" or $n == "subjectaccessreviews.authorization.k8s.io")
              and $rule.verbs == ["create"]) or
            ($delegated and ($n == "users" or $n == "groups" or $n == "serviceaccounts"
              or $n == "userextras.authentication.k8s.io" or $n == "uids.authentication.k8s.io")
              and $rule.verbs == ["impersonate"] and $rule.resourceNames == null)
          | not)
        | "ClusterRole grants more than the cache needs: \($rule.verbs) on \($n)\(if $rule.resourceNames then " \($rule.resourceNames)" else "" end)"),
      # delegated: authentication, authorization and impersonation granted
      (if $delegated then
        (["authentication.k8s.io", "tokenreviews", "create"], ["authorization.k8s.io", "subjectaccessreviews", "create"],
         ["", "users", "impersonate"], ["", "groups", "impersonate"], ["", "serviceaccounts", "impersonate"],
         ["authentication.k8s.io", "userextras", "impersonate"], ["authentication.k8s.io", "uids", "impersonate"])
        | select(allows(.[0]; .[1]; .[2]; null) | not) | "delegated auth: ClusterRole lacks \(.[2]) on \(.[1])"
      else empty end)
      end,
      # warm where expected
      (if ($c.args | index(["--cache-warm"]) != null) != $warm then "--cache-warm \(if $warm then "missing" else "unexpected" end)" else empty end),
      # scopes only for cached resources; nodeLocal pods on their own node
      ($scopes[] | select(cached(.r) | not) | "--cache-scope for \(.r), which is not cached"),
      (if $mode == "nodeLocal" and $nodescope and cached("pods") then
        (select([$scopes[] | select(.r == "pods" and .s == "fieldSelector=spec.nodeName=$(NODE_NAME)")] | length != 1)
          | "nodeLocal: no --cache-scope=pods=fieldSelector=spec.nodeName=$(NODE_NAME)"),
        (select([$c.env[] | select(.name == "NODE_NAME" and .valueFrom.fieldRef.fieldPath == "spec.nodeName")] | length != 1)
          | "nodeLocal: NODE_NAME is not the downward API spec.nodeName")
      else empty end)
    end,
  # every $(VAR) in args is a variable of the container (the kubelet expands only those)
  ([$c.args[] | scan("\\$\\(([A-Za-z_][A-Za-z0-9_]*)\\)") | .[0]] | unique[] as $v
    | select([$c.env[]?.name] | index([$v]) == null) | "args use $(\($v)), which is not in the container env"),
  # probes: ready after the caches synced, alive regardless
  (select($c.readinessProbe.httpGet.path != "/readyz") | "readinessProbe is not /readyz"),
  (select($c.livenessProbe.httpGet.path != "/livez") | "livenessProbe is not /livez"),
  (select(($c.startupProbe.httpGet.path // "/livez") != "/livez") | "a startupProbe on \($c.startupProbe.httpGet.path) could kill a pod still listing")
'
check_cache() {  # check_cache <case> <helm args> [ClusterRole rules JSON instead of the rendered ones]
  local name="$1" args="$2" mode cjson rules warm nodescope=true problems
  IFS=$'\t' read -r mode cjson < <(container_json "$tmp/$name.yaml") || true
  if [[ -z ${cjson:-} ]]; then fail "$name: no watchmux container rendered"; return; fi
  rules="${3:-$(yq -c 'select(.kind == "ClusterRole") | .rules // []' "$tmp/$name.yaml")}"
  local delegated=false clientid=false kubelet=false
  if jq -e '.args | index(["--auth-mode=delegated"]) != null' <<<"$cjson" >/dev/null; then delegated=true; fi
  if jq -e '.args | index(["--upstream-identity=client"]) != null' <<<"$cjson" >/dev/null; then clientid=true; fi
  if [[ $clientid == true ]] && jq -e '[.args[] | select(startswith("--kubeconfig=") and (startswith("--kubeconfig=/etc/watchmux/upstream/") | not))] | length == 1' <<<"$cjson" >/dev/null; then kubelet=true; fi
  case "$args" in
    *cache.enabled=false*|*cache.warm=false*) warm=false ;;
    *cache.warm=true*) warm=true ;;
    *) if [[ $mode == sidecar ]]; then warm=false; else warm=true; fi ;;
  esac
  [[ $args == *scopePodsToNode=false* ]] && nodescope=false
  if ! problems="$(jq -nr --argjson c "$cjson" --argjson rules "${rules:-[]}" --argjson builtin "$builtin_json" \
        --arg mode "$mode" --argjson warm "$warm" --argjson nodescope "$nodescope" --argjson delegated "$delegated" \
        --argjson clientid "$clientid" --argjson kubelet "$kubelet" --argjson listable "$node_listable_json" "$cache_jq" 2>&1)"; then
    fail "$name: cache check did not run: $problems"; return
  fi
  if [[ -n $problems ]]; then
    while read -r p; do fail "$name: $p"; done <<<"$problems"
  else
    say "ok   cache $name: $(jq -r '[.args[] | select(test("^--(cache|watch-cache|events-history|slow-watcher|consistency-check)"))] | join(" ")' <<<"$cjson"); ClusterRole: $(jq -r '[.[] | "\(.verbs | join("/")) \(.resources | join(","))\(if .resourceNames then "[" + (.resourceNames | join(",")) + "]" else "" end)"] | join("; ") | if . == "" then "no rules" else . end' <<<"${rules:-[]}")"
  fi
}
for c in "${cases[@]}"; do
  IFS='|' read -r name _ _ args <<<"$c"
  [[ -s $tmp/$name.yaml ]] && check_cache "$name" "$args"
done

# Identity and RBAC per mode. nodeLocal+delegated: --upstream-identity=client,
# no RBAC object at all, no service-account token, and with the kubelet's
# credentials (--kubeconfig outside /etc/watchmux) hostPath mounts that are
# read-only, at the host's own paths, of a kind that must exist (File or
# Directory: a missing path fails the pod instead of becoming an empty
# directory), run as uid 0 with every capability dropped. Elsewhere: no
# hostPath, and trusted-local never impersonates.
# shellcheck disable=SC2016 # a jq program, not shell
identity_jq='
  def arg($f): [$c.args[] | select(startswith($f + "=")) | .[($f | length) + 1:]];
  (arg("--auth-mode")[0]) as $auth
  | (arg("--upstream-identity")[0] // "impersonate") as $upstream
  | (arg("--kubeconfig")[0] // "") as $kc
  | ([$pod.volumes[]? | select(.hostPath)]) as $hp
  | ($mode == "nodeLocal" and $auth == "delegated") as $clientid
  | ($clientid and $kc != "" and ($kc | startswith("/etc/watchmux/upstream/") | not)) as $kubelet
  # the tree: the kubeconfig of the chart for the tier, a ConfigMap (DaemonSet) or a host file (static pod)
  | ($kubelet and ($kc == "/etc/watchmux/tier/kubeconfig" or ($kc | endswith("/upstream.conf")))) as $tree
  | (if $clientid then
      (select($upstream != "client") | "nodeLocal+delegated without --upstream-identity=client"),
      (select($rbac != "") | "nodeLocal+delegated renders RBAC: \($rbac)"),
      (select($static | not) | select($pod.automountServiceAccountToken != false) | "nodeLocal+delegated mounts a service-account token"),
      (select($static and ($pod.serviceAccountName // "") != "") | "the static pod names a ServiceAccount")
    else
      (select($upstream != "impersonate") | "--upstream-identity=\($upstream) outside nodeLocal+delegated"),
      (select($auth == "trusted-local" and $impersonate) | "trusted-local with the impersonate verb: every client could become anyone")
    end),
    (if $kubelet then
      (select(($tree and ($static | not)) | not) | select([$hp[] | select(.hostPath.path == $kc and .hostPath.type == "File")] | length != 1)
        | "--kubeconfig=\($kc) is not a hostPath File volume"),
      (select($tree) | select([$hp[] | select(.hostPath.path | endswith("kubelet.conf"))] | length > 0)
        | "the tree mounts the kubelet'"'"'s own kubeconfig, which it does not use"),
      # the persist directory (nodeLocal.persist): the one writable hostPath,
      # at its own path, made if missing, and what --persist-dir names
      ($hp[] | select(.name == "persist") | . as $v | [$c.volumeMounts[]? | select(.name == "persist")] as $m
        | select(($m | length) != 1 or $m[0].mountPath != $v.hostPath.path or ($m[0].readOnly // false)
          or $v.hostPath.type != "DirectoryOrCreate" or ($c.args | index("--persist-dir=\($v.hostPath.path)")) == null)
        | "the persist hostPath \($v.hostPath.path) is not a writable DirectoryOrCreate at its own path named by --persist-dir"),
      ($hp[] | select(.name != "persist") | . as $v | [$c.volumeMounts[]? | select(.name == $v.name)] as $m
        | if ($m | length) == 0 then "hostPath \($v.hostPath.path) is not mounted"
          # the static pod: its own files from the host directory at /etc/watchmux
          else ($m[] | select(.readOnly != true or (.mountPath != $v.hostPath.path
              and ($static and (.mountPath | startswith("/etc/watchmux/"))) != true))
            | "hostPath \($v.hostPath.path) mounted at \(.mountPath), readOnly \(.readOnly // false)") end),
      ($hp[] | select(.name != "persist") | select(.hostPath.type != "File" and .hostPath.type != "Directory")
        | "hostPath \(.hostPath.path) of type \(.hostPath.type // "\"\"") (a missing path would be created)"),
      (select($pod.securityContext.runAsUser != 0) | "the kubelet'"'"'s credentials (root'"'"'s, mode 0600) need uid 0"),
      (select(($c.securityContext.capabilities.drop // []) != ["ALL"] or $c.securityContext.allowPrivilegeEscalation != false
        or ($c.securityContext.capabilities.add // []) != []) | "uid 0 without every capability dropped")
    else
      ($hp[] | "hostPath \(.hostPath.path) without the kubelet'"'"'s credentials")
    end)
'
check_identity() {  # check_identity <case>
  local name="$1" f="$tmp/$1.yaml" mode cjson pod rbac impersonate=false problems summary
  IFS=$'\t' read -r mode cjson < <(container_json "$f") || true
  [[ -n ${cjson:-} ]] || return 0
  local static=false
  pod="$(static_pod_json "$f" | jq -c .spec)"
  if [[ -n $pod ]]; then
    static=true
  else
    pod="$(yq -c 'select(.kind == "DaemonSet" or .kind == "Deployment") | .spec.template.spec' "$f")"
  fi
  [[ -n $pod ]] || pod='{}'  # sidecar: the application's pod
  rbac="$(yq -r 'select(.kind | test("^(Cluster)?Role(Binding)?$")) | .kind' "$f" | sort | uniq -c | awk '{printf "%s%s", sep, ($1 > 1 ? $1 "x" : "") $2; sep=", "}')"
  [[ -n $(yq -c 'select(.kind == "ClusterRole" or .kind == "Role") | .rules[]? | select(.verbs | index("impersonate"))' "$f") ]] && impersonate=true
  if ! problems="$(jq -nr --argjson c "$cjson" --argjson pod "$pod" --arg mode "$mode" --arg rbac "$rbac" \
        --argjson impersonate "$impersonate" --argjson static "$static" "$identity_jq" 2>&1)"; then
    fail "$name: identity check did not run: $problems"; return
  fi
  if [[ -n $problems ]]; then
    while read -r p; do fail "$name: $p"; done <<<"$problems"
    return
  fi
  summary="$(jq -r '[(.args[] | select(test("^--(auth-mode|upstream-identity|kubeconfig)="))),
    (.volumeMounts[]? | select(.mountPath | startswith("/etc/watchmux") | not) | "\(.mountPath) ro=\(.readOnly // false)")] | join(" ")' <<<"$cjson")"
  say "ok   identity $name: $summary; RBAC: ${rbac:-none}$([[ $impersonate == true ]] && echo ", may impersonate")"
}
for c in "${cases[@]}"; do
  IFS='|' read -r name _ _ _ <<<"$c"
  [[ -s $tmp/$name.yaml ]] && check_identity "$name"
done
# The check itself catches a ClusterRole that lacks a cached resource, and one
# that grants more; and any rule at all with the kubelet's credentials.
if [[ -s $tmp/tier.yaml && -s $tmp/nodelocal.yaml ]]; then
  for tamper in 'tier|map(select(.resources != ["csidrivers"]))' 'tier|. + [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]' \
      'nodelocal|[{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}]'; do
    case_name="${tamper%%|*}"; tamper="${tamper#*|}"
    rules="$(yq -c "select(.kind == \"ClusterRole\") | .rules" "$tmp/$case_name.yaml" | jq -sc "(.[0] // []) | $tamper")"
    out="$(check_cache "$case_name" "-" "$rules" 2>&1)"  # its failures stay in the subshell
    if [[ $out != *"FAIL: "* ]]; then
      fail "the cache check accepted a tampered ClusterRole ($case_name: $tamper)"
    else
      say "ok   the cache check refuses a tampered ClusterRole: $(grep -m1 FAIL <<<"$out" | sed 's/.*FAIL: //')"
    fi
  done
fi

if [[ -n $binary_flags ]]; then
  "$helm" template watchmux "$chart" --set 'extraArgs[0]=--no-such-flag' >"$tmp/bogus-flag.yaml"
  if (check_flags self-test "$tmp/bogus-flag.yaml") 2>/dev/null; then
    fail "the flag check accepted --no-such-flag"
  else
    say "ok   the flag check refuses a flag the binary lacks (--no-such-flag)"
  fi
fi

for r in "${refusals[@]}"; do
  IFS='|' read -r name args want <<<"$r"
  eval "set -- $args"
  if "$helm" template watchmux "$chart" "$@" >/dev/null 2>"$tmp/refusal.err"; then
    fail "refusal $name: helm template accepted $args"
  elif [[ -n $want ]] && ! grep -qF -- "$want" "$tmp/refusal.err"; then
    cat "$tmp/refusal.err" >&2
    fail "refusal $name: refused, but without the expected message ($want)"
  else
    say "ok   refused $name: $(grep -m1 -E '^- at |execution error' "$tmp/refusal.err" | sed 's/.*execution error at //' | cut -c1-150)"
  fi
done

# --- offline: nodeLocal's static pod -------------------------------------------
# nodeLocal.mode staticPod renders the Pod manifest, the kubelet's kubeconfig
# (and in the tree upstream.conf) into ConfigMap <fullname>-static-pod, and (unless
# installer.enabled=false) the installer DaemonSet, never a watchmux DaemonSet.
# The manifest references no API object (no ServiceAccount, Secret, ConfigMap:
# the kubelet starts it before it reaches the API, and refuses such static
# pods), mounts host paths only, runs the chart's image with delegated auth,
# --upstream-identity=client and the kubelet's credentials on the node's
# loopback, and passes what the kubelet checks of every manifest
# (integration/cmd/staticpodcheck: the kubelet's decode, defaults, validation
# and API-object check).
staticpodcheck=""
if command -v go >/dev/null; then
  if (cd "$root/integration" && go build -o "$root/.run/bin/staticpodcheck" ./cmd/staticpodcheck) 2>"$tmp/staticpodcheck-build.err"; then
    staticpodcheck="$root/.run/bin/staticpodcheck"
  else
    cat "$tmp/staticpodcheck-build.err" >&2; fail "building integration/cmd/staticpodcheck"
  fi
else
  note "no go: the static pod manifests are not checked with the kubelet's validation"
fi
# check_static_pod <case> <manifest dir> <host dir> <file name> <image> <installer: yes|no>
check_static_pod() {
  local name="$1" mdir="$2" hdir="$3" file="$4" image="$5" installer="$6" f="$tmp/$1.yaml" d="$tmp/static-$1" pod problems
  mkdir -p "$d"
  pod="$(static_pod_json "$f")"
  if [[ -z $pod ]]; then fail "$name: no static pod manifest (ConfigMap *-static-pod, key $file)"; return; fi
  yq -r --arg k "$file" 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data[$k]' "$f" >"$d/$file"
  yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data["kubelet-watchmux.conf"]' "$f" >"$d/kubelet-watchmux.conf"
  local ds; ds="$(yq -c 'select(.kind == "DaemonSet") | {name: .metadata.name, spec: .spec.template.spec}' "$f" | jq -sc .)"
  # shellcheck disable=SC2016 # a jq program, not shell
  problems="$(jq -nr --argjson p "$pod" --argjson ds "$ds" --arg mdir "$mdir" --arg hdir "$hdir" --arg file "$file" \
      --arg image "$image" --arg installer "$installer" '
    ($p.spec) as $s | ($s.containers[] | select(.name == "watchmux")) as $c
    | def has_arg($a): $c.args | index([$a]) != null;
    (select($p.kind != "Pod") | "not a Pod: \($p.kind)"),
    # nothing the kubelet would need the API for
    (select($s.serviceAccountName // $s.serviceAccount) | "names a ServiceAccount"),
    (select($s.imagePullSecrets) | "imagePullSecrets (a Secret)"),
    ($s.volumes[] | select(.hostPath == null) | "volume \(.name) is not a hostPath: \(del(.name) | keys | join(","))"),
    ([$s.containers[], ($s.initContainers // [])[]] | .[] | .env[]?
      | select(.valueFrom.secretKeyRef or .valueFrom.configMapKeyRef) | "env \(.name) reads a Secret or ConfigMap"),
    ([$s.containers[], ($s.initContainers // [])[]] | .[] | select(.envFrom) | "envFrom in \(.name)"),
    # where and how it runs
    (select($s.hostNetwork != true) | "not hostNetwork"),
    (select($s.priorityClassName != "system-node-critical" or $s.priority != 2000001000) | "priority: \($s.priorityClassName) \($s.priority)"),
    (select($c.image != $image) | "image \($c.image), want \($image)"),
    (("--auth-mode=delegated", "--upstream-identity=client", "--listen=127.0.0.1:7443", "--admin-listen=127.0.0.1:9444",
      "--kubeconfig=/etc/kubernetes/kubelet.conf", "--tls-cert-file=/etc/watchmux/tls/tls.crt",
      "--client-ca-file=/etc/watchmux/client-ca/ca.crt", "--persist-dir=/var/lib/watchmux-cache",
      "--serve-stale-when-upstream-unreachable") | select(has_arg(.) | not) | "args lack \(.)"),
    ([$s.volumes[] | .hostPath.path] | sort) as $paths
    | ([$hdir + "/tls", $hdir + "/client-ca", "/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/pki",
        "/var/lib/watchmux-cache"] | sort) as $want
    | (select($paths != $want) | "hostPaths \($paths), want \($want)"),
    # no watchmux DaemonSet; the installer writes this file where the kubelet reads it
    ($ds[] | select([.spec.containers[].name] | index("watchmux")) | "a watchmux DaemonSet \(.name) beside the static pod"),
    (if $installer == "yes" then
      ([$ds[] | select(.name | endswith("-installer"))] | if length != 1 then "no installer DaemonSet" else .[0].spec as $i
        | ([$i.volumes[] | .hostPath.path // empty] | sort) as $ip
        | (select($ip != ([$mdir, $hdir] | sort)) | "installer hostPaths \($ip), want \($mdir) \($hdir)"),
          (select($i.containers[0].args != ["install-static-pod", "--files=/watchmux/files", "--host-dir=/host/watchmux",
              "--manifest=/watchmux/static/\($file)", "--manifest-dir=/host/manifests"]) | "installer args \($i.containers[0].args)"),
          (select($i.containers[0].image != $image) | "installer image \($i.containers[0].image), want the chart'"'"'s \($image)"),
          (select($i.automountServiceAccountToken != false) | "installer mounts a service-account token")
        end)
    else
      (select([$ds[] | select(.name | endswith("-installer"))] | length > 0) | "an installer DaemonSet with installer.enabled=false")
    end)
  ' 2>&1)"
  if [[ -n $problems ]]; then
    while read -r p; do fail "static pod $name: $p"; done <<<"$problems"
    return
  fi
  local kc=""
  if [[ -x $kubectl ]]; then
    kc="$("$kubectl" config view --kubeconfig "$d/kubelet-watchmux.conf" \
      -o jsonpath='{.clusters[0].cluster.server} {.clusters[0].cluster.certificate-authority} {.users[0].user.client-certificate}' 2>&1)" || true
    if [[ $kc != "https://127.0.0.1:7443 $hdir/ca.crt /var/lib/kubelet/pki/kubelet-client-current.pem" ]]; then
      fail "static pod $name: kubelet-watchmux.conf: $kc"; return
    fi
    kc="; kubelet-watchmux.conf: $kc"
  fi
  local kubelet_note=""
  if [[ -n $staticpodcheck ]]; then
    if ! kubelet_note="$("$staticpodcheck" --node node-a "$d/$file" 2>&1)"; then
      fail "static pod $name: the kubelet's checks refuse it: $kubelet_note"; return
    fi
    kubelet_note="; the kubelet's checks accept it as $(jq -r '"\(.namespace)/\(.name)"' <<<"$kubelet_note")"
  fi
  say "ok   static pod $name: $file for $mdir, image $image, host paths only ($(jq -r '[.spec.volumes[].hostPath.path] | join(" ")' <<<"$pod")), no ServiceAccount/Secret/ConfigMap$kc$kubelet_note$([[ $installer == yes ]] && echo "; installer DaemonSet writes it")"
}
check_static_pod nodelocal-staticpod /etc/kubernetes/manifests /etc/kubernetes/watchmux watchmux.yaml \
  "registry.example/watchmux:$(yq -r .appVersion "$chart/Chart.yaml")" yes
check_static_pod nodelocal-staticpod-own-tooling /var/lib/kubelet/manifests /var/lib/watchmux wm.yaml \
  "registry.example/watchmux@sha256:$(printf '%064d' 0)" no
# The kubelet check bites: the same manifest with a ServiceAccount is refused.
if [[ -n $staticpodcheck && -s $tmp/static-nodelocal-staticpod/watchmux.yaml ]]; then
  yq -y '.spec.serviceAccountName = "watchmux"' "$tmp/static-nodelocal-staticpod/watchmux.yaml" >"$tmp/static-with-sa.yaml"
  if out="$("$staticpodcheck" "$tmp/static-with-sa.yaml" 2>&1)"; then
    fail "staticpodcheck accepted a static pod that names a ServiceAccount"
  else
    say "ok   staticpodcheck refuses a static pod with a ServiceAccount: ${out##*: }"
  fi
fi

# The persist encryption key (nodeLocal.persist.encryptionKey): a Secret the
# DaemonSet mounts read-only; the static pod reads it from the host directory,
# where the installer's projected volume puts it; --persist-encryption-key-file
# names the file in both. Without the value, no key flag.
# check_persist_key <case> <key name> <static: yes|no>
check_persist_key() {
  local name="$1" key="$2" static="$3" f="$tmp/$1.yaml" cjson pod problems
  IFS=$'\t' read -r _ cjson < <(container_json "$f") || true
  if [[ $static == yes ]]; then pod="$(static_pod_json "$f" | jq -c .spec)"
  else pod="$(yq -c 'select(.kind == "DaemonSet") | .spec.template.spec' "$f")"; fi
  local projected; projected="$(yq -c 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer")))
    | .spec.template.spec.volumes[] | select(.name == "files") | .projected.sources' "$f" | jq -sc 'add // []')"
  # shellcheck disable=SC2016 # a jq program, not shell
  problems="$(jq -nr --argjson c "${cjson:-null}" --argjson pod "${pod:-null}" --argjson projected "$projected" \
      --arg key "$key" --arg static "$static" '
    (select(($c.args // []) | index(["--persist-encryption-key-file=/etc/watchmux/persist-key/\($key)"]) == null)
      | "args lack --persist-encryption-key-file=/etc/watchmux/persist-key/\($key)"),
    ([$c.volumeMounts[]? | select(.name == "persist-key")] | select(length != 1 or .[0].mountPath != "/etc/watchmux/persist-key" or .[0].readOnly != true)
      | "the key is not mounted read-only at /etc/watchmux/persist-key: \(.)"),
    ([$pod.volumes[]? | select(.name == "persist-key")][0]) as $v
    | if $static == "yes" then
        (select($v.hostPath.path != "/etc/kubernetes/watchmux/persist-key" or $v.hostPath.type != "Directory")
          | "the static pod'"'"'s key volume is not the host directory'"'"'s persist-key/: \($v)"),
        (select([$projected[] | select(.secret.name == "watchmux-persist-key") | .secret.items[]
            | select(.key == $key and .path == "persist-key/\($key)")] | length != 1)
          | "the installer does not project Secret watchmux-persist-key key \($key) to persist-key/\($key)")
      else
        (select($v.secret.secretName != "watchmux-persist-key" or $v.secret.items != [{key: $key, path: $key}])
          | "the key volume is not Secret watchmux-persist-key with item \($key): \($v)")
      end
  ' 2>&1)"
  if [[ -n $problems ]]; then while read -r p; do fail "$name: $p"; done <<<"$problems"
  else say "ok   $name: the persist key from Secret watchmux-persist-key, read-only, named by --persist-encryption-key-file"; fi
}
check_persist_key nodelocal-persist-key key no
check_persist_key nodelocal-staticpod-persist-key aes.key yes
if grep -q -- '--persist-encryption-key-file' "$tmp/nodelocal-staticpod.yaml" "$tmp/nodelocal.yaml"; then
  fail "--persist-encryption-key-file rendered without nodeLocal.persist.encryptionKey.secret"
fi

# The installer (`watchmux install-static-pod`, the real binary), run as on a
# node (--once) against a scratch host, with its input laid out as the
# installer DaemonSet's projected volume says (from the rendered ConfigMap
# and Secret; stand-ins for the client CA and the tier's CA ConfigMaps):
# install (reboot: the files the kubelet starts the pod from; every host path
# the static pod mounts exists), re-run unchanged (writes nothing), upgrade
# (a new image: the manifest is replaced, the previous one kept outside the
# manifest directory, which holds one file the kubelet reads and no temporary
# left behind), rollback (the documented copy of the previous manifest back).
installer_check() {  # installer_check <case> <helm args of the case, for the upgrade>
  local name="$1" d="$tmp/installer-$1" src h out file=watchmux.yaml
  src="$d/src"; h="$d/host"
  mkdir -p "$src/static" "$h/etc/kubernetes/manifests"
  # The pod's two volumes from a rendered case: static/ (the manifest) and
  # files/ (the projected sources, item by item, at their paths).
  mount_src() {  # <rendered file>
    local ds sources n kind obj key path
    rm -rf "$src/files"; mkdir -p "$src/files/..2026_01_01_00_00_00.0"  # a projected volume's own bookkeeping
    yq -r --arg k "$file" 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data[$k]' "$1" >"$src/static/$file"
    ds="$(yq -c 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer")))' "$1")"
    while IFS=$'\t' read -r kind obj key path; do
      mkdir -p "$(dirname "$src/files/$path")"
      case "$kind:$obj" in
        configMap:*-static-pod) yq -r --arg k "$key" 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data[$k]' "$1" >"$src/files/$path" ;;
        secret:*) yq -r --arg k "$key" 'select(.kind == "Secret" and (.metadata.name | endswith("-tls"))) | .data[$k]' "$1" | base64 -d >"$src/files/$path" ;;
        configMap:*) echo "stand-in for ConfigMap $obj key $key" >"$src/files/$path" ;;
      esac
    done < <(jq -r '.spec.template.spec.volumes[] | select(.name == "files") | .projected.sources[]
      | (if .configMap then ["configMap", .configMap] else ["secret", .secret] end) as [$k, $o]
      | $o.items[] | [$k, $o.name, .key, .path] | @tsv' <<<"$ds")
  }
  if ! yq -e 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer"))) | .spec.template.spec.volumes[] | select(.name == "files") | .projected' \
      "$tmp/$name.yaml" >/dev/null 2>&1; then
    fail "installer $name: no projected volume \"files\" with the host files for \`watchmux install-static-pod\`"; return
  fi
  mount_src "$tmp/$name.yaml"
  run_installer() {
    "$watchmux_bin" install-static-pod --files "$src/files" --host-dir "$h/etc/kubernetes/watchmux" \
      --manifest "$src/static/$file" --manifest-dir "$h/etc/kubernetes/manifests" --once
  }
  local m="$h/etc/kubernetes/manifests" w="$h/etc/kubernetes/watchmux" bad="" f
  if ! out="$(run_installer 2>&1)"; then fail "installer $name: first install: $out"; return; fi
  cmp -s "$m/$file" "$src/static/$file" || bad+=" manifest not written;"
  # Every host file the static pod mounts from watchmux's directory is there.
  for f in $(jq -r --arg w /etc/kubernetes/watchmux '.spec.volumes[].hostPath.path | select(startswith($w))' <<<"$(static_pod_json "$tmp/$name.yaml")"); do
    [[ -e $h$f ]] || bad+=" no $f for the static pod;"
  done
  for f in tls/tls.crt tls/tls.key client-ca/ca.crt ca.crt kubelet-watchmux.conf; do [[ -f $w/$f ]] || bad+=" no $f;"; done
  [[ ! -e $w/..2026_01_01_00_00_00.0 ]] || bad+=" copied the projected volume's own directory;"
  [[ $(stat -c %a "$w") == 700 && $(stat -c %a "$w/tls/tls.key") == 600 ]] || bad+=" modes $(stat -c %a "$w") $(stat -c %a "$w/tls/tls.key");"
  [[ ! -e $w/$file.previous ]] || bad+=" a previous manifest on first install;"
  if ! out="$(run_installer 2>&1)" || [[ $out == *wrote* ]]; then bad+=" unchanged re-run wrote: $out;"; fi
  local old; old="$(cat "$m/$file")"
  eval "set -- $2"
  "$helm" template watchmux "$chart" -n "$ns_privileged" "$@" --set image.tag=0.2.0 >"$tmp/$name-upgrade.yaml"
  mount_src "$tmp/$name-upgrade.yaml"
  if ! out="$(run_installer 2>&1)"; then bad+=" upgrade: $out;"; fi
  grep -q 'image: registry.example/watchmux:0.2.0' "$m/$file" || bad+=" upgrade did not write the new image;"
  [[ "$(cat "$w/$file.previous" 2>/dev/null)" == "$old" ]] || bad+=" the previous manifest was not kept;"
  local listed; listed="$(cd "$m" && ls -A | paste -sd' ' -)"
  [[ $listed == "$file" ]] || bad+=" manifest dir holds [$listed];"
  cp "$w/$file.previous" "$m/$file"  # the rollback docs/node-local.md gives
  [[ "$(cat "$m/$file")" == "$old" ]] || bad+=" rollback;"
  if [[ -n $staticpodcheck ]] && ! out="$("$staticpodcheck" "$m"/[!.]* 2>&1)"; then bad+=" the kubelet would refuse the manifest dir: $out;"; fi
  if [[ -n $bad ]]; then fail "installer $name:$bad"; return; fi
  say "ok   installer $name (watchmux install-static-pod): install writes ${w#"$h"} ($(cd "$w" && find . -type f | sort | sed 's|^\./||' | paste -sd' ' -); 0700, keys 0600) then the manifest; a re-run writes nothing; an upgrade replaces the manifest and keeps the old one as ${w#"$h"}/$file.previous, leaving one file in ${m#"$h"}; copying it back rolls back"
}
if [[ -z $watchmux_bin ]]; then
  note "no watchmux binary: the installer is not run"
elif [[ $installer_usage != *"usage: watchmux install-static-pod"* ]]; then
  fail "$watchmux_bin has no install-static-pod (the installer DaemonSet runs it): rebuild it"
elif command -v yq >/dev/null; then
  for c in "${cases[@]}"; do
    IFS='|' read -r name _ _ args <<<"$c"
    if [[ $name == nodelocal-staticpod || $name == nodelocal-staticpod-tree ]] && [[ -s $tmp/$name.yaml ]]; then installer_check "$name" "$args"; fi
  done
fi

# --- offline: issue 29's chart items ------------------------------------------------
# No object names a key twice (the API server would keep one silently: the
# installer DaemonSet once had two app.kubernetes.io/component labels).
dup_keys="$(python3 - "$tmp" "${cases[@]%%|*}" <<'PY'
import sys, yaml
class Strict(yaml.SafeLoader):
    pass
def mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)
Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
tmp, names = sys.argv[1], sys.argv[2:]
for name in names:
    try:
        text = open(f"{tmp}/{name}.yaml").read()
    except FileNotFoundError:
        continue
    try:
        for doc in yaml.load_all(text, Loader=Strict):
            for key, value in ((doc or {}).get("data") or {}).items():
                if key.endswith((".yaml", ".yml")):  # the static pod manifest inside its ConfigMap
                    list(yaml.load_all(value, Loader=Strict))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        print(f"{name}: {getattr(err, 'problem', None) or str(err).splitlines()[0]}" + (f" (line {mark.line + 1} of a document)" if mark else ""))
PY
)"
if [[ -n $dup_keys ]]; then
  while read -r p; do fail "duplicate key: $p"; done <<<"$dup_keys"
else
  say "ok   no rendered object names a key twice (${#cases[@]} cases, static pod manifests included)"
fi

# NOTES: with the kubelet's credentials, rotation needs no restart. helm
# template does not render NOTES.txt (and install --dry-run needs a cluster):
# a copy of the chart renders it as a named template into a ConfigMap.
rm -rf "$tmp/notes-chart"; mkdir -p "$tmp/notes-chart"; cp -r "$chart" "$tmp/notes-chart/"
{ echo '{{- define "chart-check.notes" }}'; cat "$chart/templates/NOTES.txt"; echo '{{- end }}'; } >"$tmp/notes-chart/watchmux/templates/_chart-check-notes.tpl"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include "chart-check.notes" . | toJson }}\n' >"$tmp/notes-chart/watchmux/templates/zz-chart-check-notes.yaml"
rm "$tmp/notes-chart/watchmux/templates/NOTES.txt"
for c in "nodelocal-staticpod|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca" \
         "nodelocal|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca"; do
  IFS='|' read -r name args <<<"$c"
  eval "set -- $args"
  if ! "$helm" template watchmux "$tmp/notes-chart/watchmux" -n "$ns_privileged" "$@" \
      --show-only templates/zz-chart-check-notes.yaml >"$tmp/notes-$name.yaml" 2>&1; then
    cat "$tmp/notes-$name.yaml" >&2; fail "NOTES $name: not rendered"; continue
  fi
  notes="$(yq -r .data.notes "$tmp/notes-$name.yaml")"
  if [[ $notes == *crictl* || $notes == *LIMITATION* || $notes != *"Certificate rotation needs no restart"* ]]; then
    fail "NOTES $name: tells operators to restart watchmux after a kubelet certificate rotation (or does not say it needs none)"
  else
    say "ok   NOTES $name: a kubelet certificate rotation needs no restart (no crictl stop)"
  fi
done
if grep -qi 'crictl\|restart it before the old one expires' "$chart/values.yaml"; then
  fail "values.yaml still tells operators to restart watchmux after a kubelet certificate rotation"
fi

# Rollout: the DaemonSet form rolls unless the kubelet is its client; both it
# and the installer take nodeLocal.rollout; and the defaults finish a
# 5,000-node rollout within the hour when every node takes its worst case:
# the old static pod's whole termination grace (shutdownGrace + 5 s, a
# request that hangs), 15 s to start the installer pod and the new
# container (the image pulled by the installer pod itself, caches warmed),
# one readiness period of the installer's probe, and minReadySeconds.
rollout_of() {  # <case> <installer|watchmux> -> "type maxUnavailable minReadySeconds" of that DaemonSet
  yq -r --arg s "$2" 'select(.kind == "DaemonSet" and ((.metadata.name | endswith("-installer")) == ($s == "installer"))) | "\(.spec.updateStrategy.type) \(.spec.updateStrategy.rollingUpdate.maxUnavailable // "-") \(.spec.minReadySeconds // 0)"' "$tmp/$1.yaml"
}
want_default="RollingUpdate 2% 10"
got_ds="$(rollout_of nodelocal-servicemonitor watchmux)"; got_installer="$(rollout_of nodelocal-staticpod installer)"
got_kubelet="$(rollout_of nodelocal watchmux)"; got_tuned="$(rollout_of nodelocal-rollout-tuned watchmux)"
if [[ $got_ds == "$want_default" && $got_installer == "$want_default" && $got_kubelet == "OnDelete - 0" && $got_tuned == "RollingUpdate 50 0" ]]; then
  say "ok   rollout: DaemonSet and installer $want_default (type, maxUnavailable, minReadySeconds); OnDelete with the kubelet as the DaemonSet's client; nodeLocal.rollout tunes both"
else
  fail "rollout: DaemonSet [$got_ds], installer [$got_installer] (want [$want_default]); kubelet on the DaemonSet [$got_kubelet] (want OnDelete); tuned [$got_tuned]"
fi
rollout_minutes="$(yq -r 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer"))) | .spec' "$tmp/nodelocal-staticpod.yaml" | jq -r \
  --argjson grace "$(static_pod_json "$tmp/nodelocal-staticpod.yaml" | jq .spec.terminationGracePeriodSeconds)" '
  (.updateStrategy.rollingUpdate.maxUnavailable | tostring) as $mu
  | (if ($mu | endswith("%")) then (5000 * ($mu | rtrimstr("%") | tonumber) / 100 | ceil) else ($mu | tonumber) end) as $wave
  | ((5000 / $wave) | ceil) as $waves
  | ($grace + 15 + .template.spec.containers[0].readinessProbe.periodSeconds + .minReadySeconds) as $node
  | "\($waves * $node / 60 | floor) \($waves) \($wave) \($node)"')"
read -r minutes waves wave per_node <<<"$rollout_minutes"
if [[ -n ${minutes:-} ]] && (( minutes < 60 )); then
  say "ok   a 5,000-node static-pod rollout with the defaults: $waves waves of $wave nodes, at worst ${per_node}s each: ${minutes} min"
else
  fail "a 5,000-node static-pod rollout with the defaults takes ${minutes:-?} min at worst ($waves waves of $wave nodes, ${per_node}s each): over the hour"
fi

# Resources: each mode's own defaults, the top-level value overrides them,
# and the chart README's sizing table gives the same defaults.
res_line() {  # <case>: "requests.cpu requests.memory limits.memory" of the watchmux container
  local c; IFS=$'\t' read -r _ c < <(container_json "$tmp/$1.yaml")
  jq -r '"\(.resources.requests.cpu // "-") \(.resources.requests.memory // "-") \(.resources.limits.memory // "-") \(.resources.limits.cpu // "-")"' <<<"$c"
}
res_bad=""
for c in "tier|tier" "sidecar|sidecar" "nodelocal|nodeLocal" "nodelocal-staticpod|nodeLocal"; do
  IFS='|' read -r name mode <<<"$c"
  want="$(yq -r --arg m "$mode" '.[$m].resources | "\(.requests.cpu) \(.requests.memory) \(.limits.memory) \(.limits.cpu // "-")"' "$chart/values.yaml")"
  got="$(res_line "$name")"
  [[ $got == "$want" ]] || res_bad+=" $name: [$got], want $mode.resources [$want];"
  grep -qF "| \`$mode\` | $(awk '{print $2}' <<<"$want") | $(awk '{print $3}' <<<"$want") |" "$chart/README.md" || res_bad+=" the README's sizing table lacks $mode's defaults ($want);"
done
[[ $(res_line nodelocal-rollout-tuned) == "- 1Gi - -" ]] || res_bad+=" resources does not override the mode's defaults: [$(res_line nodelocal-rollout-tuned)];"
if [[ -z $res_bad ]]; then
  say "ok   resources per mode: tier [$(res_line tier)], nodeLocal [$(res_line nodelocal)], sidecar [$(res_line sidecar)] (requests cpu, memory; limits memory, cpu), as in the README's sizing table; resources overrides them"
else
  fail "resources:$res_bad"
fi

# Scheduling: the tier at system-cluster-critical spread over nodes and zones,
# the node-local at system-node-critical; each overridable.
sched_line() {  # <case>: "priorityClassName topologyKeys..." of the pod
  local pod; pod="$(yq -c 'select(.kind == "DaemonSet" or .kind == "Deployment") | .spec.template.spec' "$tmp/$1.yaml")"
  [[ -n $pod ]] || pod="$(static_pod_json "$tmp/$1.yaml" | jq -c '.spec')"
  jq -r '"\(.priorityClassName // "-") \([.topologySpreadConstraints[]?.topologyKey] | join(","))"' <<<"$pod"
}
sched_bad=""
for c in "tier|system-cluster-critical kubernetes.io/hostname,topology.kubernetes.io/zone" \
         "tier-scheduling-tuned|system-node-critical kubernetes.io/hostname" \
         "nodelocal|system-node-critical " "nodelocal-staticpod|system-node-critical "; do
  IFS='|' read -r name want <<<"$c"
  got="$(sched_line "$name")"
  [[ $got == "$want" ]] || sched_bad+=" $name: [$got], want [$want];"
done
if [[ -z $sched_bad ]]; then
  say "ok   scheduling: tier [$(sched_line tier)], nodeLocal [$(sched_line nodelocal)], overridable [$(sched_line tier-scheduling-tuned)]"
else
  fail "scheduling (priorityClassName, spread keys):$sched_bad"
fi

# Images: the watchmux image only, the installer's included.
other_images="$(for c in "${cases[@]}"; do IFS='|' read -r name _ <<<"$c"; [[ -s $tmp/$name.yaml ]] || continue
  { yq -r '.. | objects | select(has("image")) | .image | strings' "$tmp/$name.yaml"; static_pod_json "$tmp/$name.yaml" | jq -r '.. | objects | .image? // empty | strings'; } |
    grep -v '^registry.example/watchmux[:@]' | sed "s|^|$name: |" || true; done | sort -u)"
if [[ -n $other_images ]]; then
  fail "images other than the watchmux image: $(echo $other_images)"
else
  say "ok   every rendered container runs the watchmux image (the static-pod installer included)"
fi

# The tree: watchmux's --kubeconfig is the chart's tree kubeconfig (the tier,
# its CA, the kubelet's rotating certificate), from a ConfigMap for the
# DaemonSet and a host file for the static pod.
tree_check() {  # <case> <kubeconfig path> <expected server> <CA path> <tls-server-name or ->
  local name="$1" path="$2" server="$3" ca="$4" sni="$5" c kc
  if [[ ! -s $tmp/$name.yaml ]]; then fail "tree $name: not rendered"; return; fi
  IFS=$'\t' read -r _ c < <(container_json "$tmp/$name.yaml")
  if [[ -n $(static_pod_json "$tmp/$name.yaml") ]]; then
    kc="$(yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data["upstream.conf"]' "$tmp/$name.yaml")"
  else
    kc="$(yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-tier-upstream"))) | .data.kubeconfig' "$tmp/$name.yaml")"
  fi
  local got want
  got="$(jq -r '[.args[] | select(startswith("--kubeconfig=") or startswith("--upstream-watch-list"))] | join(" ")' <<<"$c") $(yq -r '"\(.clusters[0].cluster.server) \(.clusters[0].cluster["certificate-authority"]) \(.clusters[0].cluster["tls-server-name"] // "-") \(.users[0].user["client-certificate"])"' <<<"$kc")"
  want="--kubeconfig=$path --upstream-watch-list=true $server $ca $sni /var/lib/kubelet/pki/kubelet-client-current.pem"
  if [[ $got == "$want" ]] && jq -e '.volumeMounts | map(select(.mountPath == "/etc/kubernetes/kubelet.conf")) | length == 0' <<<"$c" >/dev/null; then
    say "ok   tree $name: $got; the kubelet's own kubeconfig not mounted"
  else
    fail "tree $name: [$got], want [$want] and no /etc/kubernetes/kubelet.conf mount"
  fi
}
tree_check nodelocal-tree /etc/watchmux/tier/kubeconfig https://watchmux-tier.watchmux.svc:443 /etc/watchmux/tier-ca/ca.crt -
tree_check nodelocal-staticpod-tree /etc/kubernetes/watchmux/upstream.conf https://10.0.0.10:443 /etc/kubernetes/watchmux/tier-ca/ca.crt watchmux-tier.watchmux.svc
# Watch-lists by default only in the tree: a tier serves them from its cache;
# kube-apiserver serves a consistent LIST from its own.
watch_listers="" tree_cases=""
for f in "$tmp"/*.yaml; do
  name="$(basename "$f" .yaml)"
  IFS=$'\t' read -r _ c < <(container_json "$f") || continue
  if [[ $name == *-tree || $name == *-tree-* ]]; then tree_cases+=" $name"; fi
  if jq -e '.args | index("--upstream-watch-list=true")' <<<"$c" >/dev/null 2>&1; then watch_listers+=" $name"; fi
done
if [[ -n $tree_cases && $watch_listers == "$tree_cases" ]]; then
  say "ok   --upstream-watch-list only in the tree:$watch_listers"
else
  fail "--upstream-watch-list rendered in [$watch_listers ], want the tree cases [$tree_cases ] alone"
fi
if [[ -s $tmp/nodelocal-tree.yaml && $(yq -r 'select(.kind == "DaemonSet") | .spec.template.spec.dnsPolicy' "$tmp/nodelocal-tree.yaml") != ClusterFirstWithHostNet ]]; then
  fail "tree nodelocal-tree: a Service name as the tier needs cluster DNS (dnsPolicy ClusterFirstWithHostNet)"
fi

# The chart-generated serving certificate: signed by its CA, with the names
# clients dial.
check_generated_cert() {  # <case> <expected SAN substrings...>
  local name="$1"; shift
  local d="$tmp/cert-$name"
  split_docs "$tmp/$name.yaml" "$d"
  local f crt="" ca=""
  for f in "$d"/*.yaml; do
    if [[ $(doc_field kind "$f") == Secret && $(doc_name "$f") == *-tls ]]; then
      crt="$(awk '$1 == "tls.crt:" { print $2 }' "$f")"
      ca="$(awk '$1 == "ca.crt:" { print $2 }' "$f")"
    fi
  done
  if [[ -z $crt || -z $ca ]]; then fail "$name: no generated TLS Secret rendered"; return; fi
  base64 -d <<<"$crt" >"$d/tls.crt"; base64 -d <<<"$ca" >"$d/ca.crt"
  if ! openssl verify -CAfile "$d/ca.crt" "$d/tls.crt" >/dev/null 2>&1; then
    fail "$name: serving certificate does not verify against its CA"; return
  fi
  local sans; sans="$(openssl x509 -in "$d/tls.crt" -noout -ext subjectAltName 2>/dev/null | tail -n +2 | tr -d ' ')"
  local want
  for want in "$@"; do
    [[ $sans == *"$want"* ]] || { fail "$name: serving certificate lacks $want (has $sans)"; return; }
  done
  # ECDSA P-256: a third of RSA 2048's handshake CPU in a reconnect storm.
  local key; key="$(openssl x509 -in "$d/tls.crt" -noout -text 2>/dev/null | grep -E 'Public Key Algorithm|NIST CURVE' | tr -s ' ' | tr '\n' ' ')"
  [[ $key == *id-ecPublicKey*P-256* ]] || { fail "$name: serving key is not ECDSA P-256 ($key)"; return; }
  say "ok   generated certificate $name: verifies against its CA; ECDSA P-256; $sans"
}
check_generated_cert tier "DNS:watchmux.$ns_restricted.svc" "DNS:watchmux.$ns_restricted.svc.cluster.local"
check_generated_cert nodelocal "IPAddress:127.0.0.1" "DNS:watchmux.node.local" "DNS:localhost"

# The rendered sidecar example is current, and the app example carries the
# chart's container.
sidecar_render() {
  echo "# Generated by: helm template watchmux charts/watchmux -n demo -f charts/watchmux/examples/sidecar-values.yaml"
  echo "# integration/scripts/chart-check.sh checks it is current; CHART_CHECK_UPDATE=1 rewrites it."
  "$helm" template watchmux "$chart" -n demo -f "$examples/sidecar-values.yaml"
}
sidecar_render >"$tmp/sidecar-rendered.yaml"
if [[ ${CHART_CHECK_UPDATE:-0} == 1 ]]; then
  cp "$tmp/sidecar-rendered.yaml" "$examples/sidecar-rendered.yaml"
  say "rewrote $examples/sidecar-rendered.yaml"
elif diff -u "$examples/sidecar-rendered.yaml" "$tmp/sidecar-rendered.yaml" >"$tmp/drift.diff"; then
  say "ok   examples/sidecar-rendered.yaml is current"
else
  cat "$tmp/drift.diff" >&2
  fail "charts/watchmux/examples/sidecar-rendered.yaml is stale (rerun with CHART_CHECK_UPDATE=1)"
fi
if command -v yq >/dev/null && command -v jq >/dev/null; then
  chart_container="$(yq -r 'select(.kind == "ConfigMap") | .data["watchmux-container.yaml"]' "$tmp/sidecar-rendered.yaml" | yq -cS .)"
  app_container="$(yq -cS '.spec.template.spec.initContainers[] | select(.name == "watchmux")' "$examples/sidecar-app.yaml")"
  if [[ -n $chart_container && $chart_container == "$app_container" ]]; then
    say "ok   examples/sidecar-app.yaml carries the chart's watchmux container"
  else
    fail "the watchmux container in charts/watchmux/examples/sidecar-app.yaml differs from the chart's (ConfigMap key watchmux-container.yaml)"
  fi
  for f in "$root/examples/sidecar-pod.yaml" "$examples/sidecar-app.yaml"; do
    check_flags "${f#"$root"/}" "$f" && say "ok   flags in ${f#"$root"/}"
  done
else
  note "yq/jq not found: sidecar container comparison skipped"
fi

if [[ -x $kubectl ]]; then
  if server="$("$kubectl" config view --kubeconfig "$root/examples/kubelet-kubeconfig.yaml" \
        -o jsonpath='{.clusters[0].cluster.server} {.clusters[0].cluster.tls-server-name} {.current-context}' 2>"$tmp/kc.err")" \
      && [[ $server == https://127.0.0.1:7443\ watchmux.node.local\ * ]]; then
    say "ok   examples/kubelet-kubeconfig.yaml parses: $server"
  else
    cat "$tmp/kc.err" >&2; fail "examples/kubelet-kubeconfig.yaml: not the expected kubeconfig ($server)"
  fi
  # The example is the file the static-pod installer writes for the kubelet:
  # the same kubeconfig as the chart's default nodeLocal staticPod rendering.
  if command -v yq >/dev/null && command -v jq >/dev/null; then
    "$helm" template watchmux "$chart" -n "$ns_privileged" --set mode=nodeLocal --set nodeLocal.mode=staticPod \
        --set auth.clientCA.configMap=client-ca 2>"$tmp/kc-chart.err" \
      | yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data["kubelet-watchmux.conf"]' \
      >"$tmp/kc-chart.yaml"
    if "$kubectl" config view --kubeconfig "$tmp/kc-chart.yaml" -o json 2>>"$tmp/kc-chart.err" | jq -S . >"$tmp/kc-chart.json" \
        && "$kubectl" config view --kubeconfig "$root/examples/kubelet-kubeconfig.yaml" -o json | jq -S . >"$tmp/kc-example.json" \
        && [[ -s $tmp/kc-chart.json ]] && cmp -s "$tmp/kc-chart.json" "$tmp/kc-example.json"; then
      say "ok   examples/kubelet-kubeconfig.yaml is the kubeconfig the static-pod installer writes"
    else
      cat "$tmp/kc-chart.err" >&2; diff "$tmp/kc-chart.json" "$tmp/kc-example.json" >&2 || true
      fail "examples/kubelet-kubeconfig.yaml differs from the chart's static-pod kubelet-watchmux.conf"
    fi
  fi
else
  note "no kubectl at $kubectl: kubeconfig example not parsed"
fi

# --- server side -----------------------------------------------------------------
delete_scratch_pods() {  # and their ServiceAccount: a finalized namespace would leave them in etcd
  "$kubectl" --kubeconfig "$kubeconfig" -n "$ns_restricted" delete pods -l app.kubernetes.io/name=chart-check \
    --force --grace-period=0 --ignore-not-found >/dev/null 2>&1
  "$kubectl" --kubeconfig "$kubeconfig" -n "$ns_restricted" delete serviceaccount chart-check --ignore-not-found >/dev/null 2>&1
  scratch_pods=0
}
delete_namespaces() {
  local ns left
  for ns in "$@"; do
    "$kubectl" --kubeconfig "$kubeconfig" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  done
  for _ in $(seq 1 20); do
    left=()
    for ns in "$@"; do
      "$kubectl" --kubeconfig "$kubeconfig" get namespace "$ns" >/dev/null 2>&1 && left+=("$ns")
    done
    [[ ${#left[@]} -eq 0 ]] && return 0
    sleep 1
  done
  # Nothing but server-side dry runs (and a helm release since uninstalled) went
  # into them; a cluster without a namespace controller (the bare test API
  # server) never finishes the deletion, so finalize them here.
  for ns in "${left[@]}"; do
    note "namespace $ns still terminating after 20s (no namespace controller?): finalizing it"
    printf '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"%s"},"spec":{"finalizers":[]}}' "$ns" |
      "$kubectl" --kubeconfig "$kubeconfig" replace --raw "/api/v1/namespaces/$ns/finalize" -f - >/dev/null
  done
}

if [[ -z $kubeconfig ]]; then
  note "no kubeconfig given: server-side dry runs skipped"
else
  [[ -x $kubectl ]] || { fail "kubectl not found at $kubectl (run integration/scripts/build-k8s.sh)"; exit 1; }
  k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
  if ! k get --raw /readyz >/dev/null 2>"$tmp/ready.err"; then
    cat "$tmp/ready.err" >&2; fail "API server in $kubeconfig is not ready"; exit 1
  fi
  say "server: $(k version -o json 2>/dev/null | jq -r .serverVersion.gitVersion) at $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  k api-versions >"$tmp/api-versions"
  for ns in "$ns_restricted" "$ns_privileged"; do
    k create namespace "$ns" >/dev/null
    namespaces+=("$ns")
  done
  for mode in enforce warn audit; do
    k label namespace "$ns_restricted" "pod-security.kubernetes.io/$mode=restricted" >/dev/null
    k label namespace "$ns_privileged" "pod-security.kubernetes.io/$mode=privileged" >/dev/null
  done
  say "scratch namespaces: $ns_restricted (Pod Security restricted), $ns_privileged (privileged)"

  # apply_dry_run <label> <namespace> <files...>: one object per file.
  apply_dry_run() {
    local label="$1" ns="$2"; shift 2
    local f api kind applied=() skipped=()
    for f in "$@"; do
      api="$(doc_field apiVersion "$f")"; kind="$(doc_field kind "$f")"
      if ! grep -qx "$api" "$tmp/api-versions"; then
        skipped+=("$kind/$(doc_name "$f") ($api not served: CRD absent)")
        continue
      fi
      applied+=("$f")
    done
    local s
    for s in "${skipped[@]}"; do note "$label: skipped $s"; done
    [[ ${#applied[@]} -gt 0 ]] || return 0
    local args=() out
    for f in "${applied[@]}"; do args+=(-f "$f"); done
    if out="$(k --warnings-as-errors apply --dry-run=server -n "$ns" -o name "${args[@]}" 2>&1)"; then
      say "ok   server dry-run $label: $(echo "$out" | tr '\n' ' ')"
    else
      echo "$out" >&2
      fail "$label: kubectl apply --dry-run=server"
    fi
  }

  for c in "${cases[@]}"; do
    IFS='|' read -r name nskind _ _ <<<"$c"
    [[ -s $tmp/$name.yaml ]] || continue
    split_docs "$tmp/$name.yaml" "$tmp/docs-$name"
    # nodeLocal.mode staticPod: the manifest the kubelet reads, as a Pod
    pod="$(static_pod_json "$tmp/$name.yaml")"
    [[ -z $pod ]] || yq -y . <<<"$pod" >"$tmp/docs-$name/900-static-pod.yaml"
    apply_dry_run "$name" "$(ns_for "$nskind")" "$tmp/docs-$name"/*.yaml
  done
  # The example manifests, with the chart objects they need rendered into the
  # same namespace.
  split_docs "$tmp/sidecar-example-values.yaml" "$tmp/docs-chart-sidecar-app"
  cp "$examples/sidecar-app.yaml" "$tmp/docs-chart-sidecar-app/999-app.yaml"
  apply_dry_run "charts/watchmux/examples/sidecar-app.yaml" "$ns_restricted" "$tmp/docs-chart-sidecar-app"/*.yaml
  split_docs "$root/examples/sidecar-pod.yaml" "$tmp/docs-sidecar-pod"
  apply_dry_run "examples/sidecar-pod.yaml" "$ns_restricted" "$tmp/docs-sidecar-pod"/*.yaml

  # End to end: the real binary, started with the args the chart renders (only
  # addresses and file paths swapped for local ones, and $(VAR)s expanded as
  # the kubelet would), serving the chart's generated certificate, gets ready
  # (with --cache-warm: every cache synced) and answers kubectl using the
  # chart's client kubeconfig, pod lists from its cache.
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
  metric() {  # metric <admin port> <name> <resource>: the sample's value, or nothing
    curl -fsS --max-time 2 "http://127.0.0.1:$1/metrics" 2>/dev/null |
      awk -v n="$2" -v r="resource=\"$3\"" '!found && index($1, n "{") == 1 && index($1, r) { print $2; found = 1 }' || true
  }
  node_a="chart-check-a-$$"; node_b="chart-check-b-$$"  # made-up nodes
  # A client certificate for a subject, signed by the test cluster's CA (the
  # API server's --client-ca-file), as <out>.crt and <out>.key, and
  # <out>.kubeconfig presenting it to the API server directly.
  mint_client() {  # mint_client <out prefix> <subject>
    openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null &&
      openssl x509 -req -in "$1.csr" -CA "$root/.run/cluster/ca.crt" -CAkey "$root/.run/cluster/ca.key" \
        -CAcreateserial -CAserial "$tmp/ca.srl" -days 1 -out "$1.crt" \
        -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null &&
      k config view --raw --minify --flatten -o json |
      jq --arg crt "$1.crt" --arg key "$1.key" '.users[0].user = {"client-certificate": $crt, "client-key": $key}' >"$1.kubeconfig"
  }
  node_subject() { echo "/O=system:nodes/CN=system:node:$1"; }
  can_mint=0; [[ -f $root/.run/cluster/ca.key ]] && command -v openssl >/dev/null && can_mint=1
  smoke_test() {  # smoke_test <case> [upstream kubeconfig, default the admin's] [what the upstream identity is]
    local name="$1" upstream="${2:-$kubeconfig}" who="${3:-}" d="$tmp/smoke-$1" f args=() arg port admin_port
    local mode cjson pod_ns
    mkdir -p "$d"
    [[ -d $tmp/docs-$name ]] || split_docs "$tmp/$name.yaml" "$tmp/docs-$name"
    IFS=$'\t' read -r mode cjson < <(container_json "$tmp/$name.yaml") || true
    if [[ -z ${cjson:-} ]]; then fail "end to end $name: no watchmux container rendered"; return; fi
    pod_ns="$(yq -r 'select(.kind == "ConfigMap") | .metadata.namespace' "$tmp/$name.yaml" | head -1)"
    local delegated=0 kubelet=0 kckey=kubeconfig kcmap=kubeconfig
    if jq -e '.args | index(["--auth-mode=delegated"]) != null' <<<"$cjson" >/dev/null; then delegated=1; fi
    # nodeLocal+delegated with the kubelet's credentials: watchmux's upstream
    # kubeconfig (the "kubelet's kubeconfig" on the host) and the kubelet's
    # own kubeconfig through watchmux carry two certificates of the same node,
    # $node_a, minted from the test cluster's CA, as after a rotation.
    if jq -e '(.args | index(["--upstream-identity=client"]) != null)
        and ([.args[] | select(startswith("--kubeconfig=") and (startswith("--kubeconfig=/etc/watchmux/upstream/") | not))] | length == 1)' <<<"$cjson" >/dev/null; then
      if [[ $can_mint == 0 ]]; then note "end to end $name: no $root/.run/cluster/ca.key to mint node certificates: skipped"; return; fi
      kubelet=1 kckey=kubelet-kubeconfig
      # the static pod: the kubelet's kubeconfig is a host file, with watchmux's CA beside it
      [[ -z $(static_pod_json "$tmp/$name.yaml") ]] || kcmap=static-pod kckey=kubelet-watchmux.conf
      mint_client "$d/kubelet" "$(node_subject "$node_a")" && mint_client "$d/kubelet-client" "$(node_subject "$node_a")" &&
        mint_client "$d/other-node" "$(node_subject "$node_b")" || { fail "end to end $name: minting node certificates"; return; }
      cat "$d/kubelet-client.crt" "$d/kubelet-client.key" >"$d/kubelet-client-current.pem"
      upstream="$d/kubelet.kubeconfig" who="upstream as system:node:$node_a, the kubelet's credentials"
      if [[ -n ${tree_tier_port:-} ]]; then
        # The tree: the chart's own kubeconfig for the tier, pointed at the
        # tier watchmux running here, with the node's certificate.
        local tree_kc
        tree_kc="$(yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-tier-upstream"))) | .data.kubeconfig' "$tmp/$name.yaml")"
        if [[ -z $tree_kc || $tree_kc == null ]]; then fail "end to end $name: no tree kubeconfig rendered"; return; fi
        cat "$d/kubelet.crt" "$d/kubelet.key" >"$d/kubelet-upstream.pem"
        yq -y --arg server "https://127.0.0.1:$tree_tier_port" --arg ca "$tree_tier_dir/ca.crt" --arg sni "$tree_tier_name" --arg pem "$d/kubelet-upstream.pem" '
          .clusters[0].cluster.server = $server | .clusters[0].cluster["certificate-authority"] = $ca
          | .clusters[0].cluster["tls-server-name"] = $sni
          | .users[0].user["client-certificate"] = $pem | .users[0].user["client-key"] = $pem' <<<"$tree_kc" >"$d/tree.kubeconfig"
        upstream="$d/tree.kubeconfig" who="upstream the tier watchmux as system:node:$node_a, the chart's tree kubeconfig"
      fi
    fi
    port="$(free_port)"; admin_port="$(free_port)"
    for f in "$tmp/docs-$name"/*.yaml; do
      case "$(doc_field kind "$f"):$(doc_name "$f")" in
        ConfigMap:*-"$kcmap")
          # Dial the local process; verify the certificate for the name the
          # kubeconfig dials in a cluster; a stand-in for the pod's token file
          # (delegated: the admin's token, which watchmux reviews with a
          # TokenReview; trusted-local replaces it with its own identity) or
          # for kubelet-client-current.pem.
          if [[ $delegated == 1 ]]; then
            yq -r '.users[0].user.token // empty' "$kubeconfig" >"$d/token"
          else
            echo unused-by-trusted-local >"$d/token"
          fi
          # shellcheck disable=SC2016 # a jq program, not shell
          yq -y --arg port "$port" --arg token "$d/token" --arg pem "$d/kubelet-client-current.pem" --arg ca "$d/ca.crt" '
            (.clusters[0].cluster.server | capture("^(?<scheme>https?)://(?<host>[^:/]+)")) as $u
            | if .clusters[0].cluster["certificate-authority"] then .clusters[0].cluster["certificate-authority"] = $ca else . end
            | .clusters[0].cluster.server = "\($u.scheme)://127.0.0.1:\($port)"
            | if $u.scheme == "https" and (.clusters[0].cluster["tls-server-name"] == null)
              then .clusters[0].cluster["tls-server-name"] = $u.host else . end
            | if .users[0].user.tokenFile then .users[0].user.tokenFile = $token else . end
            | if .users[0].user["client-certificate"] then .users[0].user["client-certificate"] = $pem
                | .users[0].user["client-key"] = $pem else . end
          ' <(yq -r --arg k "$kckey" '.data[$k]' "$f") >"$d/client.kubeconfig" ;;
        Secret:*-tls)
          yq -r '.data["tls.crt"]' "$f" | base64 -d >"$d/tls.crt"
          yq -r '.data["tls.key"]' "$f" | base64 -d >"$d/tls.key"
          yq -r '.data["ca.crt"] // empty' "$f" | base64 -d >"$d/ca.crt" ;;
      esac
    done
    # The kubelet expands $(VAR) in args from the container's env: stand-ins
    # for the downward API (this "pod" runs on node $node_a).
    local -A envv=()
    local n v pat
    while IFS=$'\t' read -r n v; do envv[$n]="$v"; done < <(jq -r --arg node "$node_a" --arg ns "$pod_ns" '
      .env[]? | [.name, (if .value != null then .value
        else (.valueFrom.fieldRef.fieldPath // "") as $f
          | if $f == "spec.nodeName" then $node elif $f == "metadata.namespace" then $ns
            elif $f == "metadata.name" then "watchmux-chart-check" elif ($f | test("IPs?$")) then "127.0.0.1"
            else empty end end)] | @tsv' <<<"$cjson")
    while read -r arg; do
      for n in "${!envv[@]}"; do pat="\$($n)"; arg="${arg//"$pat"/${envv[$n]}}"; done
      case "$arg" in
        --listen=*) args+=("--listen=127.0.0.1:$port") ;;
        --admin-listen=*) args+=("--admin-listen=127.0.0.1:$admin_port") ;;
        --tls-cert-file=*) args+=("--tls-cert-file=$d/tls.crt") ;;
        --tls-private-key-file=*) args+=("--tls-private-key-file=$d/tls.key") ;;
        --kubeconfig=*) ;;  # the host's or a Secret's path: $upstream instead, below
        --client-ca-file=*)
          # What the chart's refusal message tells users to copy into
          # auth.clientCA.configMap.
          k -n kube-system get configmap extension-apiserver-authentication -o jsonpath='{.data.client-ca-file}' >"$d/client-ca.crt"
          args+=("--client-ca-file=$d/client-ca.crt") ;;
        *) args+=("$arg") ;;
      esac
    done < <(jq -r '.args[]' <<<"$cjson")
    args+=("--kubeconfig=$upstream")  # in a cluster: the pod's service account, or the kubelet's kubeconfig
    "$watchmux_bin" "${args[@]}" >"$d/watchmux.log" 2>&1 &
    proxy_pid=$!
    local ready=0 started=$SECONDS
    for _ in $(seq 1 300); do  # 60s: with --cache-warm, every initial list
      if [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/readyz" 2>/dev/null)" == ok ]]; then ready=1; break; fi
      kill -0 "$proxy_pid" 2>/dev/null || break
      sleep 0.2
    done
    local took=$((SECONDS - started)) version="" listed="" pods_ok=1 pods_note="" scoped=0 want got lists objects resources
    local node_ok=1 node_note="" direct via other
    if [[ $ready == 1 ]]; then
      version="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw /version 2>"$d/kubectl.err" | jq -r .gitVersion)" || true
      if [[ $kubelet == 1 ]]; then
        # The node may not list secrets cluster-wide: the API server's own 403,
        # the same through watchmux (the node's credentials) as directly.
        direct="$("$kubectl" --kubeconfig "$d/kubelet.kubeconfig" get --raw /api/v1/secrets 2>&1 >/dev/null)" || true
        via="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw /api/v1/secrets 2>&1 >/dev/null)" || true
        if [[ $direct == *"(Forbidden)"* && $via == "$direct" ]]; then
          node_note="; list secrets: 403 through watchmux as directly"
        else
          node_ok=0; node_note="; list secrets directly: [${direct:-allowed}], through watchmux: [${via:-allowed}]"
        fi
        # Another node's certificate: watchmux does not lend it its credentials.
        other="$(yq -y --arg crt "$d/other-node.crt" --arg key "$d/other-node.key" \
          '.users[0].user = {"client-certificate": $crt, "client-key": $key}' "$d/client.kubeconfig" >"$d/other.kubeconfig" &&
          "$kubectl" --kubeconfig "$d/other.kubeconfig" get --raw /version 2>&1 >/dev/null)" || true
        if [[ $other == *"(Forbidden)"*"cannot pass the client certificate"* ]]; then
          node_note+=", system:node:$node_b's certificate refused on pass-through (403)"
        else
          node_ok=0; node_note+=", system:node:$node_b's certificate on pass-through: [${other:-allowed}]"
        fi
        listed="-"
      else
        listed="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get namespace "$ns_restricted" -o name 2>>"$d/kubectl.err")" || true
      fi
      # Pods through watchmux: from its cache when pods are cached; only its
      # own node's when the cache is scoped to the node. At resourceVersion=0,
      # as a reflector lists: a consistent LIST passes through whenever the
      # cache is behind the upstream's revision (docs/design.md).
      resources="$(printf '%s\n' "${args[@]}" | sed -n 's/^--cache-resources=//p')"
      if [[ $scratch_pods == 1 && ,$resources, =~ ,(pods|\*), ]]; then
        if printf '%s\n' "${args[@]}" | grep -qx -- "--cache-scope=pods=fieldSelector=spec.nodeName=$node_a"; then
          scoped=1; want="chart-check-a"
          got="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw \
            "/api/v1/namespaces/$ns_restricted/pods?fieldSelector=spec.nodeName%3D$node_a&resourceVersion=0" 2>>"$d/kubectl.err" | jq -r '[.items[].metadata.name] | sort | join(" ")')" || true
        else
          want="chart-check-a chart-check-b"
          got="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw \
            "/api/v1/namespaces/$ns_restricted/pods?labelSelector=app.kubernetes.io%2Fname%3Dchart-check&resourceVersion=0" 2>>"$d/kubectl.err" | jq -r '[.items[].metadata.name] | sort | join(" ")')" || true
        fi
        lists="$(metric "$admin_port" watchmux_cache_list_total pods)"
        objects="$(metric "$admin_port" watchmux_watch_cache_objects pods)"
        pods_note="; pods $([[ $scoped == 1 ]] && echo "on $node_a" || echo "by label"): [$got] from the cache (lists ${lists:-0}, cached pods ${objects:-?})"
        if [[ $got != "$want" ]]; then pods_ok=0; pods_note+=", want [$want]"; fi
        if [[ ${lists:-0} == 0 ]]; then pods_ok=0; pods_note+=", but not served from the cache"; fi
        if [[ $scoped == 1 && ${objects:-} != 1 ]]; then pods_ok=0; pods_note+=", but the node-scoped cache should hold exactly 1 pod"; fi
      fi
    fi
    if [[ -n ${tree_tier_port:-} && $kubelet == 1 && $ready == 1 ]]; then
      # The node-local's caches are fed by the tier: the tier holds its
      # watches of pods and of its Node (nothing else watches nodes there).
      # Its caches are ready from disk at once; a relist (410 for the stored
      # version) is a watch-list, which the tier registers once it has
      # proved its cache fresh, a second or two later: waited for, bounded.
      local tier_pods tier_nodes
      for _ in $(seq 1 75); do  # 15s
        tier_pods="$(metric "$tree_tier_admin" watchmux_registered_watchers pods)"
        tier_nodes="$(metric "$tree_tier_admin" watchmux_registered_watchers nodes)"
        if [[ ${tier_pods:-0} -ge 1 && ${tier_nodes:-0} -ge 1 ]]; then break; fi
        sleep 0.2
      done
      node_note+="; the tier holds its watches (pods ${tier_pods:-0}, nodes ${tier_nodes:-0})"
      if [[ ${tier_pods:-0} -lt 1 || ${tier_nodes:-0} -lt 1 ]]; then node_ok=0; node_note+=", want at least 1 each"; fi
    fi
    if [[ ${smoke_keep:-} == "$name" ]]; then
      # Left running for the tree (cleanup stops it).
      tier_pid="$proxy_pid" tree_tier_port="$port" tree_tier_admin="$admin_port" tree_tier_dir="$d"
      proxy_pid=""
    else
      kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=""
    fi
    local listed_ok=0
    [[ $listed == "namespace/$ns_restricted" || ($kubelet == 1 && $listed == -) ]] && listed_ok=1
    if [[ $ready == 1 && -n $version && $listed_ok == 1 && $pods_ok == 1 && $node_ok == 1 ]]; then
      say "ok   end to end $name${who:+ ($who)}: watchmux ${args[*]//$tmp\//} ready after ${took}s, answered kubectl with the chart's kubeconfig ($(yq -r '.clusters[0].cluster | "\(.server) tls-server-name=\(.["tls-server-name"] // "-")"' "$d/client.kubeconfig"); upstream $version)$pods_note$node_note"
    else
      tail -n 20 "$d/watchmux.log" >&2; cat "$d/kubectl.err" >&2 2>/dev/null || true
      curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/readyz" >&2 2>/dev/null || true
      fail "end to end $name${who:+ ($who)}: watchmux with the chart's args and kubeconfig did not answer (ready=$ready after ${took}s, version=${version:--}, namespace=${listed:--}$pods_note$node_note)"
    fi
  }
  # The chart's node-listable table (watchmux.nodeListable), which decides
  # what nodeLocal+delegated may cache, against the real Node authorizer: with
  # a node's certificate, each entry can be listed and watched (selecting the
  # node itself where the table names a field, and then not without that
  # selector, nor for another node), and the binary's other default resources
  # cannot be listed or watched.
  node_authz_check() {
    local d="$tmp/node-authz" server r f q verb path want got bad=0 allowed=() refused=() checks=() others
    mkdir -p "$d"
    mint_client "$d/node" "$(node_subject "$node_a")" || { fail "Node authorizer: minting a node certificate"; return; }
    server="$(jq -r '.clusters[0].cluster.server' "$d/node.kubeconfig")"
    jq -r '.clusters[0].cluster["certificate-authority-data"]' "$d/node.kubeconfig" | base64 -d >"$d/server-ca.crt"
    collection() {  # resource[.group] -> its cluster-wide collection path; nothing when not served
      local res="${1%%.*}" group="" gv
      [[ $1 == *.* ]] && group="${1#*.}"
      if [[ -z $group ]]; then echo "/api/v1/$res"; return; fi
      gv="$(k get --raw "/apis/$group" 2>/dev/null | jq -r '.preferredVersion.groupVersion // empty')" || true
      [[ -z $gv ]] || echo "/apis/$gv/$res"
    }
    for r in $(jq -r 'keys[]' <<<"$node_listable_json"); do
      f="$(jq -r --arg r "$r" '.[$r]' <<<"$node_listable_json")"
      if [[ -n $f ]]; then
        checks+=("$r|fieldSelector=$f%3D$node_a|200|$r[$f=self]" "$r||403|$r" "$r|fieldSelector=$f%3D$node_b|403|$r[$f=other]")
      else
        checks+=("$r||200|$r")
      fi
    done
    others="$(yq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0].args[] | select(startswith("--cache-resources=")) | ltrimstr("--cache-resources=")' "$tmp/tier.yaml")"
    for r in ${others//,/ }; do
      jq -e --arg r "$r" 'has($r)' <<<"$node_listable_json" >/dev/null || checks+=("$r||403|$r")
    done
    local c label
    for c in "${checks[@]}"; do
      IFS='|' read -r r q want label <<<"$c"
      if ! path="$(collection "$r")" || [[ -z $path ]]; then note "Node authorizer: $r is not served here: not checked"; continue; fi
      for verb in list watch; do
        if [[ $verb == list ]]; then f="limit=1"; else f="watch=1&timeoutSeconds=1"; fi
        got="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$d/server-ca.crt" --cert "$d/node.crt" --key "$d/node.key" \
          "$server$path?${q:+$q&}$f")" || true
        if [[ $got != "$want" ]]; then
          fail "Node authorizer: $verb $path${q:+?$q} as system:node:$node_a: $got, want $want (the chart's watchmux.nodeListable is wrong)"
          bad=1
        fi
      done
      if [[ $want == 200 ]]; then allowed+=("$label"); else refused+=("$label"); fi
    done
    local a b
    printf -v a '%s, ' "${allowed[@]}"; printf -v b '%s, ' "${refused[@]}"
    [[ $bad == 1 ]] || say "ok   the Node authorizer agrees with the chart: system:node:$node_a may list and watch ${a%, }; not ${b%, }"
  }
  if [[ $can_mint == 1 ]]; then
    node_authz_check
  else
    note "no $root/.run/cluster/ca.key (or openssl) to mint a node certificate: Node authorizer not asked"
  fi
  if [[ -z $watchmux_bin ]]; then
    note "no watchmux binary: end-to-end runs skipped"
  elif ! command -v yq >/dev/null || ! command -v curl >/dev/null; then
    note "yq or curl missing: end-to-end runs skipped"
  else
    # Two pods (never started: no kubelet owns these nodes) bound to two
    # made-up nodes, for the caches to hold.
    scratch_pods=1
    {
      echo "{\"apiVersion\": \"v1\", \"kind\": \"ServiceAccount\", \"metadata\": {\"name\": \"chart-check\"}}"
      for p in a b; do
        n="$node_a"; [[ $p == b ]] && n="$node_b"
        jq -nc --arg name "chart-check-$p" --arg node "$n" '{apiVersion: "v1", kind: "Pod",
          metadata: {name: $name, labels: {"app.kubernetes.io/name": "chart-check"}},
          spec: {nodeName: $node, serviceAccountName: "chart-check", automountServiceAccountToken: false,
            securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: "RuntimeDefault"}},
            containers: [{name: "pause", image: "registry.k8s.io/pause:3.10",
              securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: ["ALL"]}}}]}}'
      done
    } | jq -s '{apiVersion: "v1", kind: "List", items: .}' >"$tmp/scratch-pods.json"
    if k -n "$ns_restricted" create -f "$tmp/scratch-pods.json" >/dev/null 2>"$tmp/scratch-pods.err"; then
      say "scratch pods: chart-check-a on node $node_a, chart-check-b on node $node_b (in $ns_restricted)"
    else
      cat "$tmp/scratch-pods.err" >&2; fail "creating the scratch pods"; scratch_pods=0
    fi
    smoke_test nodelocal
    smoke_test nodelocal-staticpod
    smoke_test tier
    smoke_test sidecar
    smoke_test tier-cache-all
    # The tree: the tier (the chart's tier args, delegated, with the API
    # server's client CA to verify nodes' certificates), then a node-local
    # watchmux whose upstream is the chart's tree kubeconfig pointed at it.
    if [[ $can_mint == 1 ]]; then
      smoke_keep=tier-delegated-client-ca smoke_test tier-delegated-client-ca
      if [[ -n $tier_pid ]]; then
        tree_tier_name="watchmux.$ns_restricted.svc"  # in the tier's generated certificate
        smoke_test nodelocal-tree
        kill "$tier_pid" 2>/dev/null || true; wait "$tier_pid" 2>/dev/null || true; tier_pid=""
        tree_tier_port=""
      else
        fail "end to end: the tree's tier did not stay up"
      fi
    fi
  fi

  # A real install and upgrade: the generated CA and serving certificate stay.
  # A release name of its own: ClusterRoles are cluster-wide, and another
  # chart-check may be running against the same cluster.
  rel="wmcheck-$$"
  secret_data() { k -n "$ns_privileged" get secret "$rel-watchmux-$1" -o "jsonpath={.data.$2}" 2>/dev/null; }
  # The release's ServiceAccount, with a token from the TokenRequest API, is
  # all watchmux needs to warm its caches (the installed args, run locally),
  # and may not do more than the cache needs; in nodeLocal+delegated it is
  # bound to nothing (no smoke test: watchmux uses the node's credentials
  # there, checked end to end above). Expectations: "verb resource yes|no".
  installed_check() {  # installed_check <label> <smoke test with the ServiceAccount: yes|no> <expectation>...
    local label="$1" smoke="$2" sa="$rel-watchmux" token e verb res sub want got bad=0 seen=() rbac
    shift 2
    "$helm" get manifest "$rel" --kubeconfig "$kubeconfig" -n "$ns_privileged" >"$tmp/installed-$label.yaml"
    rbac="$(yq -r 'select(.kind | test("^(Cluster)?Role(Binding)?$")) | "\(.kind)/\(.metadata.name)"' "$tmp/installed-$label.yaml" | paste -sd' ' -)"
    if [[ $smoke == yes ]]; then
      if ! token="$(k -n "$ns_privileged" create token "$sa" --duration=10m 2>"$tmp/token.err")"; then
        cat "$tmp/token.err" >&2; fail "installed $label: no token for ServiceAccount $sa"; return
      fi
      k config view --raw --minify --flatten -o json | jq --arg t "$token" '.users[0].user = {token: $t}' >"$tmp/sa-$label.kubeconfig"
      [[ -z $watchmux_bin ]] || smoke_test "installed-$label" "$tmp/sa-$label.kubeconfig" "upstream as ServiceAccount $sa"
    elif [[ -n $rbac ]]; then
      fail "installed $label: renders RBAC ($rbac), want none"; bad=1
    fi
    for e in "$@"; do
      read -r verb res want <<<"$e"
      sub=(); if [[ $res == */* ]]; then sub=(--subresource="${res#*/}"); res="${res%%/*}"; fi
      got="$(k auth can-i "$verb" "$res" "${sub[@]}" --as="system:serviceaccount:$ns_privileged:$sa" 2>/dev/null)" || true
      seen+=("$verb $res${sub[*]:+ ${sub[*]}}: $got")
      [[ $got == "$want" ]] || { fail "installed $label: ServiceAccount $sa can-i $verb $res ${sub[*]}: $got, want $want"; bad=1; }
    done
    local joined; printf -v joined '%s; ' "${seen[@]}"
    [[ $bad == 1 ]] || say "ok   installed $label: RBAC ${rbac:-none}; ServiceAccount $sa ${joined%; }"
  }
  rel_installed=1  # from here on, cleanup uninstalls it if this run stops half-way
  if "$helm" install "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal --set auth.clientCA.configMap=client-ca >"$tmp/install.log" 2>&1; then
    installed_check nodelocal no "list pods no" "watch services no" "create tokenreviews.authentication.k8s.io no" \
      "impersonate users no" "impersonate groups no" "impersonate serviceaccounts no"
    ca1="$(secret_data ca 'tls\.crt')"; crt1="$(secret_data tls 'tls\.crt')"
    if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal --set auth.clientCA.configMap=client-ca \
          --set logFormat=text >"$tmp/upgrade.log" 2>&1; then
      ca2="$(secret_data ca 'tls\.crt')"; crt2="$(secret_data tls 'tls\.crt')"
      if [[ -n $ca1 && $ca1 == "$ca2" && $crt1 == "$crt2" ]]; then
        say "ok   helm upgrade kept the generated CA and serving certificate"
      else
        fail "helm upgrade replaced the generated CA or serving certificate"
      fi
      "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal --set auth.clientCA.configMap=client-ca \
        --set 'tls.extraDNSNames[0]=watchmux.example' >"$tmp/upgrade2.log" 2>&1 || fail "helm upgrade (new SAN)"
      ca3="$(secret_data ca 'tls\.crt')"; crt3="$(secret_data tls 'tls\.crt')"
      if [[ $ca3 == "$ca1" && $crt3 != "$crt1" ]] && base64 -d <<<"$crt3" | openssl x509 -noout -ext subjectAltName | grep -q watchmux.example; then
        say "ok   a new subject alt name re-issued the serving certificate from the same CA"
      else
        fail "changing tls.extraDNSNames did not re-issue the certificate from the kept CA"
      fi
      # tier (delegated, impersonating): the ServiceAccount's ClusterRole.
      if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=tier >"$tmp/upgrade-tier.log" 2>&1; then
        installed_check default yes "list pods yes" "watch configmaps yes" "get endpointslices.discovery.k8s.io yes" \
          "list secrets no" "get customresourcedefinitions.apiextensions.k8s.io no" "create pods no" \
          "create tokenreviews.authentication.k8s.io yes" "create subjectaccessreviews.authorization.k8s.io yes" \
          "impersonate users yes" "impersonate groups yes" "impersonate serviceaccounts yes"
      else
        cat "$tmp/upgrade-tier.log" >&2; fail "helm upgrade (tier)"
      fi
      if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=tier \
            --set 'cache.resources={*}' >"$tmp/upgrade3.log" 2>&1; then
        installed_check all yes "list secrets yes" "watch leases.coordination.k8s.io yes" "get secrets no" \
          "get nodes/proxy no" "get pods/log no" "get customresourcedefinitions.apiextensions.k8s.io yes" "create pods no"
      else
        cat "$tmp/upgrade3.log" >&2; fail "helm upgrade (tier, cache.resources *)"
      fi
    else
      cat "$tmp/upgrade.log" >&2; fail "helm upgrade"
    fi
    if "$helm" uninstall "$rel" --kubeconfig "$kubeconfig" -n "$ns_privileged" >/dev/null 2>&1; then
      rel_installed=0
    else
      fail "helm uninstall"
    fi
    if [[ -n $(secret_data ca 'tls\.crt') ]]; then
      say "ok   helm uninstall kept the CA Secret (helm.sh/resource-policy: keep)"
      k -n "$ns_privileged" delete secret "$rel-watchmux-ca" >/dev/null
    else
      fail "helm uninstall deleted the CA Secret"
    fi
  else
    cat "$tmp/install.log" >&2; fail "helm install (nodeLocal)"
  fi
fi

if [[ $scratch_pods == 1 ]]; then delete_scratch_pods || true; fi
if [[ ${#namespaces[@]} -gt 0 ]]; then
  delete_namespaces "${namespaces[@]}" || true
  namespaces=()
fi

if (( failures > 0 )); then
  say "$failures check(s) failed"
  exit 1
fi
say "all checks passed"
