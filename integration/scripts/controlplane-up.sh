#!/usr/bin/env bash
# Starts a real Kubernetes control plane and N kubemark hollow nodes on top of
# the test cluster (cluster-up.sh), optionally through watchmux, so that the
# real kubelet, kube-proxy, kube-scheduler and kube-controller-manager code is
# what talks to watchmux (issue 13).
#
#   kube-scheduler           client cert system:kube-scheduler
#   kube-controller-manager  client cert system:kube-controller-manager, one
#                            service-account token per controller, the
#                            cluster's SA key, short node-monitor-grace-period
#   hollow node i (0..N-1)   kubemark --morph=kubelet with its own client cert
#                            system:node:hollow-node-<i> (Node authorizer and
#                            NodeRestriction), kubemark --morph=proxy with the
#                            kube-system/kube-proxy service account's token
#
# TOPOLOGY selects who talks to whom:
#   direct      everything to kube-apiserver
#   node-local  each node's kubelet and proxy to its own watchmux, run with the
#               chart's nodeLocal arguments: delegated auth with client certs
#               (--client-ca-file), --upstream-identity=client with the node's
#               own credentials, pods and its Node scoped to the node
#   tier        scheduler and controller-manager through one tier watchmux
#               (delegated, impersonating, its own RBAC as the chart renders it)
#   tree        node-local watchmuxes whose upstream is the tier watchmux, with
#               the API server as their fallback (--upstream-fallback-servers);
#               the scheduler and controller-manager straight to the API
#               server, as on a real control plane (TREE_CONTROL_PLANE=tier:
#               through the tier, as bench-controlplane.sh's figures were taken;
#               leader election then ends them if the tier is down 10 s)
#
# Needs the cluster started with WATCHMUX_CLUSTER_NODE_AUTHZ=1 (this script
# starts it so if it is not up). State, certificates, kubeconfigs, logs and pid
# files live in .run/controlplane (controlplane-down.sh stops everything).
# Every listener is on 127.0.0.1 except the hollow kubelets' servers, which
# kubemark binds to 0.0.0.0 (hard-coded); all ports are CP_PORT_BASE + offset:
#   +1 scheduler, +2 controller-manager, +10/+11 tier watchmux api/admin,
#   +100+10*i kubelet i, +102+10*i/+103+10*i node-local watchmux i api/admin.
#
# Usage: TOPOLOGY=direct N=3 integration/scripts/controlplane-up.sh
#   N=3                 hollow nodes
#   TOPOLOGY=direct     direct | node-local | tier | tree
#   CP_PORT_BASE=31000  see above (keep within 30000-39999)
#   WATCHMUX_BIN        default target/debug/watchmux (cargo build if missing)
#   NODE_MONITOR_GRACE  controller-manager --node-monitor-grace-period (20s)
#   NODE_WATCHMUX_EXTRA_ARGS  more flags for the node-local watchmuxes (word-split),
#                       e.g. --authorization-cache-unauthorized-ttl=1s
#   NODE_PERSIST=1      node-local watchmuxes keep their caches on disk as the chart's
#                       nodeLocal.persist renders it: --persist-dir=<node dir>/persist, the
#                       kubelet's set, --serve-stale-when-upstream-unreachable
#   NODE0_UPSTREAM=URL  hollow-node-0's watchmux's upstream instead of kube-apiserver
#                       (reboot-scenario.sh puts a relay there that it can cut)
#   KUBELET_V=1         the hollow kubelets' -v (2 logs "SyncLoop ADD" and PLEG events)
#   CP_NODES_ONLY=1     the hollow nodes alone, no scheduler or controller-manager
#                       (pods are then bound by their creator: spec.nodeName); for
#                       API servers older than these binaries, whose new APIs the
#                       scheduler's and controller-manager's informers wait for
#   CP_API_URL=URL      the API server's address for every component and node-local
#                       (default: the cluster's); bench-upgrade.sh gives its TCP
#                       balancer over three API servers
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
bin="$root/.run/bin"
cluster="$root/.run/cluster"
cp="$root/.run/controlplane"
n="${N:-3}"
topology="${TOPOLOGY:-direct}"
base="${CP_PORT_BASE:-31000}"
watchmux="${WATCHMUX_BIN:-$root/target/debug/watchmux}"
timeout_s="${CP_TIMEOUT:-180}"

case "$topology" in direct|node-local|tier|tree) ;; *)
  echo "controlplane-up: TOPOLOGY is direct, node-local, tier or tree, not $topology" >&2; exit 2 ;;
esac
[[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 50 ]] || { echo "controlplane-up: N is 1..50" >&2; exit 2; }

"$scripts/build-controlplane.sh"
if ! "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  WATCHMUX_CLUSTER_NODE_AUTHZ=1 "$scripts/cluster-up.sh"
fi
# shellcheck disable=SC1091
source "$cluster/env"
kubectl() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
if ! tr '\0' ' ' < "/proc/$(cat "$cluster/apiserver.pid")/cmdline" | grep -q NodeRestriction; then
  echo "controlplane-up: the cluster runs without NodeRestriction; restart it with" \
       "WATCHMUX_CLUSTER_NODE_AUTHZ=1 (cluster-down.sh; cluster-up.sh)" >&2
  exit 1
fi
if [[ "$topology" != direct && ! -x "$watchmux" ]]; then
  # The features every test step builds with (see the Makefile's test-unit): one dev build.
  (cd "$root" && cargo build --locked --features fault-injection)
fi

if [[ -f "$cp/topology" ]]; then
  echo "controlplane-up: already running ($(cat "$cp/topology")); run controlplane-down.sh first" >&2
  exit 1
fi
rm -rf "$cp/logs" "$cp/cmds"
mkdir -p "$cp"/{pki,kubeconfig,logs,pids,nodes,cmds}
umask 077

# --- credentials ----------------------------------------------------------------
# mint <name> <CN> [O] [SAN]: a client (or, with SAN, serving) cert from the
# cluster CA, kept across runs.
mint() {
  local name="$1" cn="$2" o="${3:-}" san="${4:-}" subj="/CN=$2"
  [[ -f "$cp/pki/$name.crt" ]] && return 0
  [[ -n "$o" ]] && subj="/O=$o/CN=$cn"
  openssl genpkey -quiet -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$cp/pki/$name.key"
  local ext=("basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment")
  if [[ -n "$san" ]]; then ext+=("extendedKeyUsage=serverAuth" "subjectAltName=$san")
  else ext+=("extendedKeyUsage=clientAuth"); fi
  openssl req -new -key "$cp/pki/$name.key" -subj "$subj" |
    openssl x509 -req -CA "$CA_CERT" -CAkey "$CA_KEY" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -out "$cp/pki/$name.crt" -extfile <(printf '%s\n' "${ext[@]}") 2>/dev/null
}
# kubeconfig <file> <server> (cert <name> | token <token>)
kubeconfig() {
  local file="$1" server="$2" kind="$3" cred="$4" user
  if [[ $kind == cert ]]; then
    user="    client-certificate: $cp/pki/$cred.crt
    client-key: $cp/pki/$cred.key"
  else
    user="    token: $cred"
  fi
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: $server
    certificate-authority: $CA_CERT
users:
- name: u
  user:
$user
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
EOF
}

mint scheduler system:kube-scheduler
mint controller-manager system:kube-controller-manager
mint watchmux-tier watchmux-tier
mint watchmux-serving watchmux "" "IP:127.0.0.1,DNS:localhost,DNS:watchmux.node.local"
for i in $(seq 0 $((n - 1))); do mint "node-$i" "system:node:hollow-node-$i" system:nodes; done

# kube-proxy: a service account token (a certificate client other than the
# node itself is refused on pass-through by --upstream-identity=client).
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-proxy, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: watchmux-cp-kube-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-proxier}
subjects: [{kind: ServiceAccount, name: kube-proxy, namespace: kube-system}]
---
# The tier watchmux's own rights, as charts/watchmux/templates/rbac.yaml
# renders them for mode=tier (delegated): read what it caches, review
# tokens and access, impersonate its callers.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: watchmux-cp-tier}
rules:
- apiGroups: [""]
  resources: [pods, nodes, services, endpoints, namespaces, configmaps]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [node.k8s.io]
  resources: [runtimeclasses]
  verbs: [get, list, watch]
- apiGroups: [storage.k8s.io]
  resources: [csidrivers]
  verbs: [get, list, watch]
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
- apiGroups: [""]
  resources: [users, groups, serviceaccounts]
  verbs: [impersonate]
- apiGroups: [authentication.k8s.io]
  resources: ["*"]
  verbs: [impersonate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: watchmux-cp-tier}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: watchmux-cp-tier}
subjects: [{kind: User, name: watchmux-tier, apiGroup: rbac.authorization.k8s.io}]
EOF
proxy_token="$(kubectl -n kube-system create token kube-proxy --duration=48h)"

# --- processes --------------------------------------------------------------------
# start <name> <cmd...>: detached, pid in pids/<name>.pid, log in
# logs/<name>.log, the command line in cmds/<name> (controlplane-ctl.sh
# stops and starts single processes with it).
start() {
  local name="$1"; shift
  printf '%q ' "$@" > "$cp/cmds/$name"
  ( exec setsid nohup "$@" >> "$cp/logs/$name.log" 2>&1 < /dev/null ) &
  echo $! > "$cp/pids/$name.pid"
}
deadline=$(( $(date +%s) + timeout_s ))
wait_until() {  # wait_until <what> <cmd...>
  local what="$1"; shift
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || { echo "controlplane-up: $what not ready within ${timeout_s}s" >&2; exit 1; }
    sleep 0.5
  done
}
ready() { curl -fsS --max-time 2 "http://127.0.0.1:$1/readyz" | grep -q ok; }

api="${CP_API_URL:-$APISERVER_URL}"
tier_url="https://127.0.0.1:$((base + 10))"
echo "$topology $n" > "$cp/topology"

# The tier watchmux (chart mode=tier: delegated auth, impersonation, the
# binary's default cached resources, warm cache).
if [[ $topology == tier || $topology == tree ]]; then
  kubeconfig "$cp/kubeconfig/watchmux-tier" "$api" cert watchmux-tier
  start watchmux-tier "$watchmux" --kubeconfig="$cp/kubeconfig/watchmux-tier" \
    --listen="127.0.0.1:$((base + 10))" --admin-listen="127.0.0.1:$((base + 11))" \
    --tls-cert-file="$cp/pki/watchmux-serving.crt" --tls-private-key-file="$cp/pki/watchmux-serving.key" \
    --logging-format=json --shutdown-grace=30s --cache-warm --events-history-window=75s --slow-watcher-grace=5s \
    --auth-mode=delegated --client-ca-file="$CA_CERT"
  wait_until "tier watchmux" ready $((base + 11))
fi
cp_server="$api"
if [[ $topology == tier || ( $topology == tree && "${TREE_CONTROL_PLANE:-api}" == tier ) ]]; then
  cp_server="$tier_url"
fi

kubeconfig "$cp/kubeconfig/scheduler" "$cp_server" cert scheduler
kubeconfig "$cp/kubeconfig/controller-manager" "$cp_server" cert controller-manager
if [[ "${CP_NODES_ONLY:-0}" != 1 ]]; then
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$cp/kubeconfig/scheduler" \
    --bind-address=127.0.0.1 --secure-port=$((base + 1)) --leader-elect=true -v=1
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$cp/kubeconfig/controller-manager" \
    --bind-address=127.0.0.1 --secure-port=$((base + 2)) --leader-elect=true -v=1 \
    --use-service-account-credentials=true --controllers='*' \
    --service-account-private-key-file="$cluster/sa.key" --root-ca-file="$CA_CERT" \
    --cluster-cidr=10.64.0.0/16 --service-cluster-ip-range=10.0.0.0/24 --allocate-node-cidrs=false \
    --node-monitor-grace-period="${NODE_MONITOR_GRACE:-20s}" --node-monitor-period=2s \
    --concurrent-deployment-syncs=10 --concurrent-replicaset-syncs=10
fi

for i in $(seq 0 $((n - 1))); do
  node="hollow-node-$i"
  dir="$cp/nodes/$node"; mkdir -p "$dir/tmp"
  kport=$((base + 100 + 10 * i)); wport=$((kport + 2)); wadmin=$((kport + 3))
  server="$api"
  if [[ $topology == node-local || $topology == tree ]]; then
    upstream="$api"
    if [[ $topology == tree ]]; then upstream="$tier_url"; fi
    if [[ $i == 0 && -n "${NODE0_UPSTREAM:-}" ]]; then upstream="$NODE0_UPSTREAM"; fi
    # In the tree, the API server is each node-local's fallback: with the
    # tier down, the kubelet's writes still reach it (TREE_FALLBACK=0: none).
    fallback=()
    if [[ $topology == tree && "${TREE_FALLBACK:-1}" == 1 ]]; then
      fallback=("--upstream-fallback-servers=$api" "--upstream-fallback-ca-file=$CA_CERT")
    fi
    persist=()
    if [[ "${NODE_PERSIST:-0}" == 1 ]]; then
      persist=("--persist-dir=$dir/persist"
        --persist-resources=pods,nodes,services,runtimeclasses.node.k8s.io,csidrivers.storage.k8s.io
        --serve-stale-when-upstream-unreachable)
    fi
    kubeconfig "$dir/upstream.kubeconfig" "$upstream" cert "node-$i"
    # The chart's nodeLocal arguments (delegated auth, kubelet credentials):
    # cache.resources for kubelet credentials, pods and the Node scoped to
    # this node, --upstream-identity=client.
    start "watchmux-$node" "$watchmux" --kubeconfig="$dir/upstream.kubeconfig" \
      --listen="127.0.0.1:$wport" --admin-listen="127.0.0.1:$wadmin" \
      --tls-cert-file="$cp/pki/watchmux-serving.crt" --tls-private-key-file="$cp/pki/watchmux-serving.key" \
      --logging-format=json --shutdown-grace=30s \
      --cache-resources=pods,nodes,services,runtimeclasses.node.k8s.io,csidrivers.storage.k8s.io \
      --cache-warm --events-history-window=75s --slow-watcher-grace=5s \
      "--cache-scope=nodes=fieldSelector=metadata.name=$node" \
      "--cache-scope=pods=fieldSelector=spec.nodeName=$node" \
      --auth-mode=delegated --upstream-identity=client --client-ca-file="$CA_CERT" \
      "${fallback[@]}" "${persist[@]}" ${NODE_WATCHMUX_EXTRA_ARGS:-}
    server="https://127.0.0.1:$wport"
  fi
  kubeconfig "$dir/kubelet.kubeconfig" "$server" cert "node-$i"
  kubeconfig "$dir/proxy.kubeconfig" "$server" token "$proxy_token"
  start "kubelet-$node" env TMPDIR="$dir/tmp" "$bin/kubemark" --morph=kubelet --name="$node" \
    --kubeconfig="$dir/kubelet.kubeconfig" --kubelet-port="$kport" --kubelet-read-only-port=0 \
    --use-host-image-service=false --max-pods=110 -v="${KUBELET_V:-1}"
  start "proxy-$node" env TMPDIR="$dir/tmp" "$bin/kubemark" --morph=proxy --name="$node" \
    --kubeconfig="$dir/proxy.kubeconfig" -v=1
done

if [[ $topology == node-local || $topology == tree ]]; then
  for i in $(seq 0 $((n - 1))); do wait_until "watchmux of hollow-node-$i" ready $((base + 103 + 10 * i)); done
fi
nodes_ready() {
  local got
  got="$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^hollow-node-.*=True$')"
  [[ "$got" -ge "$n" ]]
}
wait_until "$n Ready hollow nodes" nodes_ready
echo "controlplane-up: $topology with $n hollow nodes ready (state: $cp)"
