#!/usr/bin/env bash
# A control-plane upgrade under load (issue 44, item 4): three kube-apiservers
# of UPGRADE_FROM (1.36) on one etcd, upgraded one at a time to UPGRADE_TO
# (1.37, the pinned minor) as a rolling upgrade does it: SIGTERM, wait for the
# exit, the new binary on the same port with the same flags, wait for /readyz,
# a pause, the next. The restart bench (integration/bench/restart/,
# RESTART_KIND=upgrade) keeps N reflector-shaped watchers on the ConfigMaps
# of its namespace, a writer creating, updating and deleting ConfigMaps
# there throughout, and measures side by side, each side on a fresh cluster:
#   direct    the watchers through a plain TCP load balancer over the three
#             (tcp-balancer.py): every watch on a server that stops breaks
#   watchmux  the watchers through watchmux --upstream-servers=the three
# After each step: the time until every watcher has the next write, its
# broken streams, LISTs and 410s. At the end every watcher's events are
# checked against etcd's own watch of the namespace's keys
# (integration/cmd/etcdwatch, started before the watchers): lost, out of
# order, duplicated. And at each step (step 0: before the first upgrade) the
# served form: the minor watchmux says it serves (watchmux_upstream_minor_info's
# `served`) against the oldest ready minor (the right one while any server is
# still old), and two GETs through watchmux compared with the same GET at a
# live API server of each minor: a ConfigMap in protobuf (from watchmux's
# cache, by its own encoder) byte for byte, and a RoleBinding as a Table,
# everything but the Age cells (1.37's Role column describes `roleRef`,
# 1.36's `RoleRef`: src/encode/table/columns.txt). No protobuf field of a
# creatable kind differs between the two minors (ControllerRevision's `data`,
# the one non-omitempty 1.37-only field, is required), and watchmux has no
# printer for a kind whose columns differ, so it passes that Table through;
# the probe says so. The check reports; it never stops the run.
#
# Beside the watchers, real nodes (controlplane-up.sh, CP_NODES_ONLY=1):
# UPGRADE_HOLLOW kubemark hollow kubelets and kube-proxies, through the load
# balancer; on the watchmux side each node's kubelet and proxy through its
# own node-local watchmux (--upstream-servers=the three), as the chart's
# nodeLocal mode runs it. After each step a pod is bound to every node
# (spec.nodeName) and timed until every one is Running (its kubelet saw it
# on its pod watch and reported its status), the previous step's pods are
# deleted, and every node's Ready condition and lease are read. At the end
# the kubelets' logs are counted for watch failures. The kubemark binaries
# are the pinned minor's (1.37) throughout: a kubelet newer than its API
# servers, which the version-skew policy does not promise but which works
# here; a 1.37 kube-scheduler and kube-controller-manager do not (their
# informers wait for APIs 1.36 does not serve: PodCertificateRequest,
# DeviceTaintRule, StorageVersionMigration), hence no Deployment, and 1.36
# builds of them would take 10-20 minutes more to build.
#
# Usage: bench-upgrade.sh [N...]       (default: 1000; or UPGRADE_NS="...")
#   UPGRADE_FROM=1.36 UPGRADE_TO=1.37 UPGRADE_PAUSE_S=5 UPGRADE_WRITES_PER_S=4
#   UPGRADE_SIDES="direct watchmux" UPGRADE_HOLLOW=3 (0: no nodes)
# Ports (clear of the lead's cluster and CI's): etcd 25379/25380, the API
# servers 18401-18403, the load balancer 18400, watchmux 18500 (admin 18501),
# the control plane from UPGRADE_CP_PORT_BASE 18700 (controlplane-up.sh's
# offsets: up to 18700 + 103 + 10 * (UPGRADE_HOLLOW - 1)).
#
# bench-upgrade.sh --step: one step, as the bench runs it (RESTART_STEP=k:
# upgrade the k-th server, then check the form; 0: check only). Prints the
# check as one JSON line.
set -euo pipefail
export ETCD_PORT="${ETCD_PORT:-25379}" ETCD_PEER_PORT="${ETCD_PEER_PORT:-25380}"
export APISERVER_PORT="${APISERVER_PORT:-18401}"
export UPGRADE_FROM="${UPGRADE_FROM:-1.36}" UPGRADE_TO="${UPGRADE_TO:-1.37}"
export UPGRADE_EXTRA_PORTS="${UPGRADE_EXTRA_PORTS:-18402 18403}"
export UPGRADE_LB_PORT="${UPGRADE_LB_PORT:-18400}"
export BENCH_PORT="${BENCH_PORT:-18500}" BENCH_ADMIN_PORT="${BENCH_ADMIN_PORT:-18501}"
bench_ns=watchmux-bench-restart   # the restart bench's namespace
form_object=upgrade-form          # the RoleBinding of the form check
hollow="${UPGRADE_HOLLOW:-3}"     # hollow nodes (0: none)
pods_ns=upgrade-pods              # their Deployment's namespace
export CP_PORT_BASE="${UPGRADE_CP_PORT_BASE:-18700}"
# NodeRestriction, which controlplane-up.sh's kubelets need, on every API
# server: the first, the extra ones and their replacements.
(( hollow == 0 )) || export WATCHMUX_CLUSTER_NODE_AUTHZ=1
here="$(cd "$(dirname "$0")" && pwd)"
state="$here/../../.run/cluster"
read -r -a ports <<< "$APISERVER_PORT $UPGRADE_EXTRA_PORTS"

# curl_api URL [curl args...]: as the cluster's admin, trusting its CA. Not
# as curl: kube-apiserver pretty-prints JSON for curl's User-Agent, which
# watchmux then passes through (reason "pretty").
curl_api() {
  local url="$1"; shift
  curl -sS --max-time 10 --cacert "$state/ca.crt" -A bench-upgrade \
    -H "Authorization: Bearer $(cut -d, -f1 "$state/tokens.csv" | head -1)" "$@" "$url"
}

# The minor a server's /version gives (1.36), or "down".
server_minor() {
  curl_api "https://127.0.0.1:$1/version" 2>/dev/null |
    python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["major"]+"."+v["minor"].rstrip("+"))' 2>/dev/null ||
    echo down
}

# form_probe NAME PATH ACCEPT: the answer of one live server of each minor
# (the same object from the same etcd: one is enough) to $tmp/NAME-<minor>,
# watchmux's to $tmp/NAME-watchmux (retried 10 s: it has the object once its
# cache has the write), and how many reads watchmux passed through meanwhile
# to $tmp/NAME-passthrough (watchmux_cache_passthrough_total).
form_probe() {
  local name="$1" path="$2" accept="$3" kv p m code="" before after
  for kv in "${minors[@]}"; do
    p="${kv%%=*}" m="${kv#*=}"
    [[ $m == down || -f $tmp/$name-$m ]] && continue
    curl_api "https://127.0.0.1:$p$path" -f -H "$accept" -o "$tmp/$name-$m" 2>/dev/null || rm -f "$tmp/$name-$m"
  done
  before="$(passthrough_reads)"
  for _ in $(seq 1 50); do
    code="$(curl_api "http://127.0.0.1:$BENCH_PORT$path" -H "$accept" -o "$tmp/$name-watchmux" -w '%{http_code}' 2>/dev/null || true)"
    [[ $code == 200 ]] && break
    sleep 0.2
  done
  [[ $code == 200 ]] || rm -f "$tmp/$name-watchmux"
  after="$(passthrough_reads)"
  echo $(( after - before )) > "$tmp/$name-passthrough"
}
passthrough_reads() {
  curl -s --max-time 10 "http://127.0.0.1:$BENCH_ADMIN_PORT/metrics" |
    awk '/^watchmux_cache_passthrough_total/ {n += $2} END {printf "%d\n", n}'
}

# --step: upgrade the RESTART_STEP-th server (none for 0), then report the forms.
upgrade_step() {
  local step="${RESTART_STEP:?RESTART_STEP}" root="$here/../.."
  if (( step > 0 )); then
    WATCHMUX_K8S_MINOR="$UPGRADE_TO" bash "$here/cluster-up.sh" --replace-apiserver "${ports[step-1]}" >&2
    sleep "${UPGRADE_PAUSE_S:-5}"
  fi
  local tmp; tmp="$(mktemp -d)"
  # The RoleBinding of the Table probe, made once (409 the next times);
  # through the balancer, as any client's write.
  local rbac=/apis/rbac.authorization.k8s.io/v1/namespaces/$bench_ns/rolebindings
  curl_api "https://127.0.0.1:$UPGRADE_LB_PORT$rbac" -o /dev/null -H 'Content-Type: application/json' -d \
    "{\"metadata\":{\"name\":\"$form_object\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"view\"},\"subjects\":[{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"User\",\"name\":\"$form_object\"}]}" || true
  local p minors=()
  for p in "${ports[@]}"; do minors+=("$p=$(server_minor "$p")"); done
  # resourceVersion=0: from a cache (watchmux's, each API server's watch
  # cache); without it a GET is a consistent read, which watchmux passes
  # through to whichever server it is on.
  form_probe protobuf "/api/v1/namespaces/$bench_ns/configmaps/restart-marker?resourceVersion=0" \
    'Accept: application/vnd.kubernetes.protobuf'
  form_probe table "$rbac/$form_object?resourceVersion=0" \
    'Accept: application/json;as=Table;v=v1;g=meta.k8s.io, application/json'
  curl -s --max-time 10 "http://127.0.0.1:$BENCH_ADMIN_PORT/metrics" > "$tmp/metrics" || true
  nodes_probe "$step" > "$tmp/nodes"
  python3 - "$tmp" "$step" "$UPGRADE_FROM" "$UPGRADE_TO" "${minors[@]}" <<'EOF'
import json, os, re, sys
tmp, step, old, new, servers = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
servers = dict(s.split("=", 1) for s in servers)

def raw(name):
    p = os.path.join(tmp, name)
    return open(p, "rb").read() if os.path.exists(p) else None

def without_ages(body):
    """A Table, keys in their order, without its Age cells (they tick)."""
    try:
        table = json.loads(body, object_pairs_hook=list)
    except ValueError:
        return body
    fields = dict(table)
    names = [dict(c).get("name") for c in fields.get("columnDefinitions", [])]
    if "Age" in names:
        age = names.index("Age")
        for row in fields.get("rows", []):
            for k, (key, cells) in enumerate(row):
                if key == "cells":
                    row[k] = (key, [c for i, c in enumerate(cells) if i != age])
    return table

up = sorted({m for m in servers.values() if m != "down"}, key=lambda m: tuple(map(int, m.split("."))))
expected = up[0] if up else None

def probe(name, normal):
    """watchmux's answer against each live minor's; whether it came from watchmux's cache."""
    live = {m: normal(raw(f"{name}-{m}")) for m in (old, new) if raw(f"{name}-{m}") is not None}
    mine = raw(f"{name}-watchmux")
    passed = (raw(f"{name}-passthrough") or b"").strip() not in (b"", b"0")
    out = {"equals": {m: normal(mine) == b for m, b in live.items()} if mine is not None else {},
           "live_forms_differ": (live[old] != live[new]) if len(live) == 2 else None,
           "passed_through": passed}
    same = [m for m, eq in out["equals"].items() if eq]
    if mine is None:
        out["verdict"] = "no answer from watchmux"
    elif passed:
        out["verdict"] = f"passed through ({'='.join(same) or 'no live minor'}'s form)"
    elif expected not in live:
        out["verdict"] = f"unchecked: no live {expected} server"
    elif expected in same and out["live_forms_differ"] is False:
        out["verdict"] = "ok (both minors' bytes are the same)"
    elif expected in same:
        out["verdict"] = f"ok ({expected}'s form)"
    elif same:
        out["verdict"] = f"WRONG: {same[0]}'s form in front of {expected} servers"
    else:
        out["verdict"] = "WRONG: neither minor's bytes"
    return out

metrics = open(os.path.join(tmp, "metrics")).read().splitlines() if raw("metrics") else []
labels = [dict(re.findall(r'(\w+)="([^"]*)"', l)) for l in metrics
          if l.startswith("watchmux_upstream_minor_info{") and l.rstrip().endswith(" 1")]
served = ",".join(sorted({l.get("served", "?") for l in labels})) or "absent"
minor_ok = "ok" if served == expected else f"WRONG: serves {served}, the oldest ready is {expected}"
probes = {"protobuf": probe("protobuf", lambda b: b), "table": probe("table", lambda b: b and without_ages(b))}
nodes = json.loads(raw("nodes") or b"null")
print(json.dumps({"step": step, "servers": servers, "expected_minor": expected, "served_minor": served,
                  "upstream_minor_info": labels, "probes": probes, "nodes": nodes,
                  "form": f"minor {minor_ok}; ConfigMap protobuf {probes['protobuf']['verdict']}; "
                          f"RoleBinding Table {probes['table']['verdict']}"}))
EOF
  rm -rf "$tmp"
}
# kubectl through the load balancer, as the cluster's admin.
kubectl_lb() {
  "$here/../../.run/bin/kubectl" --kubeconfig "$here/../../.run/bench-upgrade/kubeconfig-lb" --request-timeout=10s "$@"
}

# bind_pods STEP: a pod bound to each hollow node, labelled with the step.
bind_pods() {
  local i
  for i in $(seq 0 $((hollow - 1))); do
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"step-%s-%s","labels":{"step":"%s"}},"spec":{"nodeName":"hollow-node-%s","containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}}\n' \
      "$1" "$i" "$1" "$i"
  done | kubectl_lb -n "$pods_ns" create -f - >/dev/null
}

# nodes_probe STEP: the hollow nodes' state as JSON (null without them): a
# pod bound to every node and the seconds until all are Running (bounded at
# 120 s: null past it), the previous step's pods deleted; every node's Ready
# condition, and the oldest lease renewal's age.
nodes_probe() {
  (( hollow > 0 )) || { echo null; return; }
  local running=null start phases="" ready leases
  start=$(date +%s.%N)
  bind_pods "$1" 2>/dev/null || true
  for _ in $(seq 1 480); do
    phases="$(kubectl_lb -n "$pods_ns" get pods -l "step=$1" -o jsonpath='{range .items[*]}{.status.phase} {end}' 2>/dev/null || true)"
    if [[ $(wc -w <<< "$phases") -eq $hollow && $phases != *Pending* ]]; then
      running="$(echo "$(date +%s.%N) - $start" | bc)"; break
    fi
    sleep 0.25
  done
  (( $1 == 0 )) || kubectl_lb -n "$pods_ns" delete pods -l "step=$(($1 - 1))" --wait=false >/dev/null 2>&1 || true
  ready="$(kubectl_lb get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}' 2>/dev/null || true)"
  leases="$(kubectl_lb -n kube-node-lease get leases -o jsonpath='{range .items[*]}{.spec.renewTime} {end}' 2>/dev/null || true)"
  python3 - "$running" "$ready" "$leases" <<'EOF'
import datetime, json, sys
running, ready, leases = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
r = dict(kv.split("=", 1) for kv in ready)
now = datetime.datetime.now(datetime.timezone.utc)
ages = [(now - datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))).total_seconds() for t in leases]
print(json.dumps({"pods_running_s": None if running == "null" else round(float(running), 1),
                  "ready": sum(v == "True" for v in r.values()), "nodes": len(r),
                  "oldest_lease_s": round(max(ages), 1) if ages else None}))
EOF
}

if [[ ${1:-} == --step ]]; then upgrade_step; exit 0; fi

listen="127.0.0.1:$BENCH_PORT"
admin="127.0.0.1:$BENCH_ADMIN_PORT"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then ns=("$@"); else read -r -a ns <<< "${UPGRADE_NS:-1000}"; fi
read -r -a sides <<< "${UPGRADE_SIDES:-direct watchmux}"
logs="$root/.run/bench-upgrade"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/restart-*.json "$logs"/etcd-*.jsonl
bench_build restart "$logs"
bash "$scripts/build-k8s.sh" "$UPGRADE_FROM" >/dev/null
bash "$scripts/build-k8s.sh" >/dev/null   # the pinned minor, and etcdwatch with it

# Stops every API server of this cluster, whichever minor's binary it runs
# (cluster-down.sh stops only the cluster's own minor's), then the rest.
stop_cluster() {
  local pidfile pid
  for pidfile in "$state"/apiserver*.pid; do
    [[ -e $pidfile ]] || continue
    pid="$(cat "$pidfile")"
    if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */kube-apiserver ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
  bash "$scripts/cluster-down.sh" >/dev/null || true
}
lb_pid=""
upgrade_cleanup() {
  (( hollow == 0 )) || bash "$scripts/controlplane-down.sh" >/dev/null 2>&1 || true
  stop_oracle
  [[ -z $lb_pid ]] || kill "$lb_pid" 2>/dev/null || true
  stop_watchmux
  stop_cluster
}
trap upgrade_cleanup EXIT

# A fresh cluster of the old minor: etcd and three API servers.
fresh_cluster() {
  stop_cluster
  WATCHMUX_K8S_MINOR="$UPGRADE_FROM" bash "$scripts/cluster-up.sh" >/dev/null
  local p
  for p in $UPGRADE_EXTRA_PORTS; do bash "$scripts/cluster-up.sh" --extra-apiserver "$p" >/dev/null; done
}

# start_nodes SIDE: the hollow nodes (none with UPGRADE_HOLLOW=0), through
# the balancer; on the watchmux side each through a node-local watchmux
# over the three API servers. Then their pods' namespace.
start_nodes() {
  (( hollow > 0 )) || return 0
  local topology=direct node_args=""
  if [[ $1 == watchmux ]]; then topology=node-local node_args="--upstream-servers=$servers"; fi
  bash "$scripts/controlplane-down.sh" >/dev/null 2>&1 || true
  CP_NODES_ONLY=1 N="$hollow" TOPOLOGY="$topology" CP_API_URL="https://127.0.0.1:$UPGRADE_LB_PORT" \
    NODE_WATCHMUX_EXTRA_ARGS="$node_args" WATCHMUX_BIN="$logs/watchmux" bash "$scripts/controlplane-up.sh"
  kubectl_lb create namespace "$pods_ns" >/dev/null
}

# stop_nodes TAG: the kubelets' and node-locals' logs kept as
# $logs/nodes-TAG/, their watch failures counted into nodes-TAG.json, the
# control plane stopped.
stop_nodes() {
  (( hollow > 0 )) || return 0
  local kept="$logs/nodes-$1"
  rm -rf "$kept"; cp -a "$root/.run/controlplane/logs" "$kept"
  bash "$scripts/controlplane-down.sh" >/dev/null 2>&1 || true
  python3 - "$kept" > "$logs/nodes-$1.json" <<'EOF'
import glob, json, os, re, sys
kept = sys.argv[1]
patterns = {
    # client-go's reflector: a watch that ended with an error (not a timeout)
    "watch_ended_with_error": r"watch ended with error",
    "very_short_watch": r"very short watch",
    # a relist after the watch's resourceVersion expired
    "too_old_resource_version": r"too old resource version",
    "connection_refused": r"connection refused",
    "failed_to_update_node_lease": r"[Ff]ailed to update lease",
    "node_status_errors": r"Error updating node status",
}
logs = sorted(glob.glob(os.path.join(kept, "kubelet-*.log")))
out = {key: 0 for key in patterns}
for path in logs:
    text = open(path, errors="replace").read()
    for key, pattern in patterns.items():
        out[key] += len(re.findall(pattern, text))
print(json.dumps({"kubelets": len(logs), "kubelet_log_counts": out}))
EOF
  echo "bench-upgrade: nodes ($1): $(cat "$logs/nodes-$1.json")"
}

backends=() servers=""
for p in "${ports[@]}"; do backends+=("127.0.0.1:$p"); servers+="${servers:+,}https://127.0.0.1:$p"; done
python3 "$scripts/tcp-balancer.py" "$UPGRADE_LB_PORT" "${backends[@]}" > "$logs/tcp-balancer.log" 2>&1 &
lb_pid=$!
fresh_cluster
started_cluster=1   # for machine_line: this script's own cluster
machine_line
echo "upgrade: ${ports[*]} from $UPGRADE_FROM to $UPGRADE_TO, in that order"

for n in "${ns[@]}"; do
  for side in "${sides[@]}"; do
    fresh_cluster
    # The bench's own requests (writes, markers) through the balancer too:
    # they go on while any one server is down.
    sed "s|server: https://127.0.0.1:$APISERVER_PORT|server: https://127.0.0.1:$UPGRADE_LB_PORT|" \
      "$root/.run/kubeconfig" > "$logs/kubeconfig-lb"
    oracle="$logs/etcd-$n-$side.jsonl"
    start_oracle "$bench_ns" "$oracle" "$logs/etcdwatch-$n-$side.log"
    start_nodes "$side"
    echo "bench-upgrade: $n watchers, $side"
    WATCHMUX_ARGS="--upstream-servers=$servers ${WATCHMUX_ARGS:-}" \
      run_config restart "upgrade-$n-$side" configmaps,rolebindings.rbac.authorization.k8s.io RESTART_KIND=upgrade \
      RESTART_N="$n" RESTART_SIDES="$side" RESTART_CMD="bash $scripts/bench-upgrade.sh --step" \
      WATCHMUX_BENCH_DIRECT_ADDR="127.0.0.1:$UPGRADE_LB_PORT" WATCHMUX_BENCH_KUBECONFIG="$logs/kubeconfig-lb" \
      UPGRADE_ORACLE="$oracle" UPGRADE_STEPS="${#ports[@]}"
    stop_oracle
    stop_nodes "$n-$side"
  done
done
echo
echo "bench-upgrade: done in ${SECONDS}s"
