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
#   - GitOps: two helm template renders of the tier and nodeLocal defaults
#     (as Argo CD renders them, no cluster to look up) are byte-identical,
#     carry no key material and no checksum/tls (cert-manager issues the
#     certificate there), and with tls.generated.withoutCluster=generate they
#     differ (why that is not the default);
#   - serviceMonitor.metricRelabelings lands in the ServiceMonitor's endpoint;
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
#   - the goaway chance: --goaway-chance=0.02 by default in tier only (none in
#     nodeLocal and sidecar), limits.goawayChance overrides it in any mode, and
#     one past 0.02 (or not a number) is refused;
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
# A render here cannot read a cluster, where helm install generates the
# serving certificate (and helm template, by default, has cert-manager issue
# it: tls.generated.withoutCluster). So that the stages check and run the
# certificate helm install would make, helm template renders as helm install
# does, unless RENDER_LIKE_GITOPS=1 (the GitOps check: the chart's own
# default, as Argo CD renders it). A case's own -f or --set still wins.
printf 'tls:\n  generated:\n    withoutCluster: generate\n' >"$tmp/render-like-install.yaml"
cat >"$tmp/helm" <<EOF
#!/usr/bin/env bash
case "\$1" in
  template)
    shift
    if [[ \${RENDER_LIKE_GITOPS:-0} == 1 ]]; then exec "$helm" template -f "$tmp/image-values.yaml" "\$@"; fi
    exec "$helm" template -f "$tmp/image-values.yaml" -f "$tmp/render-like-install.yaml" "\$@" ;;
  lint|install|upgrade) sub="\$1"; shift; exec "$helm" "\$sub" -f "$tmp/image-values.yaml" "\$@" ;;
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

# --- the stages, in order (integration/scripts/chart-check/) ---------------------
stages="$scripts/chart-check"
# shellcheck source=chart-check/cases.sh
source "$stages/cases.sh"
# shellcheck source=chart-check/10-templates.sh
source "$stages/10-templates.sh"
# shellcheck source=chart-check/20-cache-identity.sh
source "$stages/20-cache-identity.sh"
# shellcheck source=chart-check/30-static-pod.sh
source "$stages/30-static-pod.sh"
# shellcheck source=chart-check/40-defaults-examples.sh
source "$stages/40-defaults-examples.sh"

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
  # shellcheck source=chart-check/50-server-dry-run.sh
  source "$stages/50-server-dry-run.sh"
  # shellcheck source=chart-check/60-server-end-to-end.sh
  source "$stages/60-server-end-to-end.sh"
  # shellcheck source=chart-check/70-server-install.sh
  source "$stages/70-server-install.sh"
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
