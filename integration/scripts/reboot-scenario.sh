#!/usr/bin/env bash
# The offline reboot of issue 27, with the real control plane: a hollow node
# (kubemark: the real kubelet over a fake runtime) behind its node-local
# watchmux, whose only way to kube-apiserver is a relay that this script
# cuts into a black hole (blackhole-relay.py: connections accepted, bytes
# dropped; kube-apiserver itself keeps running for everyone else). Then:
#
#   1. pods Running on hollow-node-0 (a Deployment, direct to kube-apiserver);
#   2. two watchers start: one on the node-local watchmux, one on
#      kube-apiserver (reboot-watcher.py: list, watch, resume from the last
#      version after a disconnection, as an informer does);
#   3. the relay is cut, and every pod annotated at kube-apiserver (events
#      the node sees only once the link is back); watchmux and the kubelet
#      are killed (SIGKILL) and started again; the kubelet starts from an
#      empty state (kubemark makes a new root directory and its fake runtime
#      is in memory), as after a reboot;
#   4. the kubelet's view, from its own log (-v=2): "SyncLoop ADD" source=api
#      with the pods (the list it got from watchmux) and a PLEG ContainerStarted
#      event for each pod (admitted, its sandbox and containers started),
#      timed from the kubelet's start, for OFFLINE_WINDOW seconds (the Node
#      goes NotReady meanwhile: the controller-manager's grace is 20 s);
#   5. the relay restored; converged when the Node is Ready, the pods are
#      Running on it and there are exactly the Deployment's replicas (no
#      duplicates), and watchmux no longer serves unproven state;
#   6. the node-local watcher's events compared with kube-apiserver's: every
#      event the API server delivered for the node's pods after both watchers
#      started, by name and resourceVersion, must have reached it.
#
# MODE=persist runs it with the chart's nodeLocal persistence (NODE_PERSIST=1:
# --persist-dir, the kubelet's set, --serve-stale-when-upstream-unreachable);
# MODE=memory without (the binary's default); MODE=both (default) runs both and
# prints one table. Fails when the persist run does not admit every pod
# within ADMIT_LIMIT (10 s) while offline, loses an event or does not
# converge; the memory run is expected to admit nothing while offline.
#
# Usage: integration/scripts/reboot-scenario.sh
#   MODE=both            persist | memory | both
#   PODS=5               the Deployment's replicas, all on hollow-node-0
#   OFFLINE_WINDOW=30    seconds the kubelet is watched while the relay is cut
#   CP_PORT_BASE=31000   controlplane-up.sh's ports; the relay is on +90
#   WATCHMUX_BIN         default target/debug/watchmux, built here with the
#                        features every test step uses
# Uses the test cluster's ports (APISERVER_PORT ...) as cluster-up.sh does;
# starts the cluster (with NodeRestriction) if it is not up and then stops it
# again; always stops the control plane it starts (controlplane-down.sh).
# About 2 minutes for both modes on 2 cores, once built (each keeps the link cut for
# OFFLINE_WINDOW seconds). Figures in docs/node-local.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cpdir="$root/.run/controlplane"
mode="${MODE:-both}"
pods="${PODS:-5}"
window="${OFFLINE_WINDOW:-30}"
admit_limit="${ADMIT_LIMIT:-10}"
base="${CP_PORT_BASE:-31000}"
relay_port=$((base + 90))
wport=$((base + 102)); wadmin=$((base + 103))
node=hollow-node-0
work="$root/.run/reboot"
case "$mode" in persist|memory|both) ;; *) echo "reboot-scenario: MODE is persist, memory or both" >&2; exit 2 ;; esac

"$scripts/build-controlplane.sh"
started_cluster=0
if ! "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  WATCHMUX_CLUSTER_NODE_AUTHZ=1 "$scripts/cluster-up.sh"
  started_cluster=1
fi
if [[ -z "${WATCHMUX_BIN:-}" ]]; then (cd "$root" && cargo build --locked -q --features fault-injection); fi
# shellcheck disable=SC1091
source "$root/.run/cluster/env"
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" --request-timeout=20s "$@"; }
mkdir -p "$work"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# alive <pid> <word>: the pid runs and its command line has the word.
alive() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"; }
started=()  # pids this script started itself, stopped on exit
cleanup() {
  for p in "${started[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  "$scripts/controlplane-down.sh" >/dev/null 2>&1 || true
  if [[ $started_cluster == 1 ]]; then "$scripts/cluster-down.sh" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# kill9 <name>: SIGKILL the control-plane process <name> (its pid file).
kill9() {
  local pid
  pid="$(cat "$cpdir/pids/$1.pid")"
  if alive "$pid" "${2:-}"; then kill -KILL "$pid"; fi
  for _ in $(seq 1 40); do alive "$pid" "${2:-}" || return 0; sleep 0.1; done
  echo "reboot-scenario: $1 (pid $pid) survived SIGKILL" >&2; exit 1
}
# start_again <name>: the recorded command line, detached, as controlplane-ctl.sh
# starts it but without waiting for readiness (it cannot come while offline).
start_again() {
  ( eval "exec setsid nohup $(cat "$cpdir/cmds/$1")" >> "$cpdir/logs/$1.log" 2>&1 < /dev/null ) &
  echo $! > "$cpdir/pids/$1.pid"
}
running_on_node() {  # prints the count of Running pods of the namespace on the node
  k -n "$1" get pods --field-selector "spec.nodeName=$node,status.phase=Running" -o name | wc -l
}
all_running() { [[ "$(running_on_node "$1")" -eq "$pods" ]]; }
listed_both() { grep -q '"list"' "$1" && grep -q '"list"' "$2"; }
node_ready() {
  [[ "$(k get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
# wait_for <seconds> <what> <cmd...>
wait_for() {
  local limit="$1" what="$2"; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < end )) || { echo "reboot-scenario: $what not within ${limit}s" >&2; return 1; }
    sleep 0.5
  done
}

# kubelet_view <log> <offset> <ns> <t0>: what the kubelet's log says since
# <offset>: the pods it listed from the API ("SyncLoop ADD" source=api) and
# those it started (a PLEG ContainerStarted event: admitted, sandbox and
# container started); sets listed, admitted, and t_listed, t_admitted (s
# after t0) when first complete.
kubelet_view() {
  local fresh; fresh="$(tail -c +"$(($2 + 1))" "$1")"
  listed="$( (grep '"SyncLoop ADD" source="api"' <<<"$fresh" | grep -o "\"$3/[^\"]*\"" || true) | sort -u | wc -l)"
  admitted="$( (grep 'SyncLoop (PLEG): event for pod' <<<"$fresh" | grep 'ContainerStarted' |
    grep -o "pod=\"$3/[^\"]*\"" || true) | sort -u | wc -l)"
  if [[ $t_listed == - && $listed -ge $pods ]]; then t_listed="$(since "$4")"; fi
  if [[ $t_admitted == - && $admitted -ge $pods ]]; then t_admitted="$(since "$4")"; fi
}

run_mode() {  # run_mode persist|memory: one run; writes $work/<mode>.result
  local m="$1" ns="reboot-$1" persist=0 relay_pid wl_pid wd_pid
  [[ $m == persist ]] && persist=1
  echo "--- reboot-scenario: $m"
  rm -f "$work/$m".*
  local upstream_hostport="${APISERVER_URL#https://}"
  python3 "$scripts/blackhole-relay.py" "$relay_port" "$upstream_hostport" > "$work/$m.relay.log" 2>&1 &
  relay_pid=$!; started+=("$relay_pid")
  TOPOLOGY=node-local N=1 NODE_PERSIST=$persist NODE0_UPSTREAM="https://127.0.0.1:$relay_port" KUBELET_V=2 \
    "$scripts/controlplane-up.sh"

  # 1. the pods, Running on the node.
  k delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
  k create namespace "$ns" >/dev/null
  k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: $pods
  selector: {matchLabels: {app: reboot}}
  template:
    metadata: {labels: {app: reboot}}
    spec:
      nodeSelector: {kubernetes.io/hostname: $node}
      containers: [{name: c, image: registry.k8s.io/pause:3.10}]
EOF
  wait_for 120 "$pods pods Running on $node" all_running "$ns"

  # 2. the watchers.
  local q="fieldSelector=spec.nodeName%3D$node"
  python3 "$scripts/reboot-watcher.py" "$work/$m.local.jsonl" "https://127.0.0.1:$wport/api/v1/namespaces/$ns/pods" \
    "$CA_CERT" --cert "$cpdir/pki/node-0.crt" --key "$cpdir/pki/node-0.key" "$q" &
  wl_pid=$!; started+=("$wl_pid")
  python3 "$scripts/reboot-watcher.py" "$work/$m.direct.jsonl" "$APISERVER_URL/api/v1/namespaces/$ns/pods" \
    "$CA_CERT" --token "$ADMIN_TOKEN" "$q" &
  wd_pid=$!; started+=("$wd_pid")
  wait_for 20 "the watchers' lists" listed_both "$work/$m.local.jsonl" "$work/$m.direct.jsonl"
  if [[ $persist == 1 ]]; then
    # Every change so far committed to disk (the writer batches, off the hot path).
    sleep 2
  fi

  # 3. the black hole, then the reboot.
  kill -USR1 "$relay_pid"
  # Changes the node cannot see until the link is back: the watcher must
  # still get each of them after it.
  k -n "$ns" annotate pods --all "reboot.watchmux.dev/outage=$(date +%s)" --overwrite >/dev/null
  sleep 3
  kill9 "watchmux-$node" watchmux
  kill9 "kubelet-$node" kubemark
  local klog="$cpdir/logs/kubelet-$node.log" offset
  offset="$(stat -c %s "$klog")"
  start_again "watchmux-$node"
  start_again "kubelet-$node"
  local t_start; t_start="$(now)"

  # 4. the kubelet's view while offline, for the whole window in both modes
  # (the same outage: the Node goes NotReady after the controller-manager's
  # 20 s grace).
  t_listed=- t_admitted=- listed=0 admitted=0
  local end=$(( $(date +%s) + window ))
  while (( $(date +%s) < end )); do kubelet_view "$klog" "$offset" "$ns" "$t_start"; sleep 0.2; done
  local offline_listed="$listed" offline_admitted="$admitted" readyz unproven node_offline=Ready
  node_ready || node_offline=NotReady
  readyz="$(curl -s --max-time 2 "http://127.0.0.1:$wadmin/readyz?verbose" | grep -E 'cache-unproven|readyz check' | tr '\n' ' ' || true)"
  unproven="$(curl -s --max-time 2 "http://127.0.0.1:$wadmin/metrics" | grep -c '^watchmux_cache_serving_unproven{.*} 1' || true)"
  echo "offline (${window}s): kubelet listed ${listed} pods at +${t_listed}s, started ${admitted} at +${t_admitted}s" \
       "after its start; the Node ${node_offline}; watchmux: ${unproven} caches serving unproven state; readyz: ${readyz:-no answer}"

  # 5. the upstream back; convergence (and the kubelet's view, if it had none).
  kill -USR2 "$relay_pid"
  local t_restore; t_restore="$(now)"
  local converged=-
  local end2=$(( $(date +%s) + 180 ))
  while (( $(date +%s) < end2 )); do
    kubelet_view "$klog" "$offset" "$ns" "$t_start"
    if [[ $t_admitted != - ]] && node_ready && [[ "$(running_on_node "$ns")" -eq $pods ]] &&
       [[ "$(k -n "$ns" get pods -o name | wc -l)" -eq $pods ]] &&
       curl -fsS --max-time 2 "http://127.0.0.1:$wadmin/readyz" 2>/dev/null | grep -q ok &&
       ! curl -s --max-time 2 "http://127.0.0.1:$wadmin/metrics" | grep -q '^watchmux_cache_serving_unproven{.*} 1'; then
      converged="$(since "$t_restore")"; break
    fi
    sleep 0.5
  done
  echo "restored: converged at +${converged}s (node Ready, $pods pods Running, no duplicates, nothing unproven);" \
       "the kubelet had started its pods at +${t_admitted}s after its start"

  # 6. the events: let both watchers catch up, then compare.
  sleep 3
  kill -TERM "$wl_pid" "$wd_pid" 2>/dev/null || true
  wait "$wl_pid" "$wd_pid" 2>/dev/null || true
  local compare
  compare="$(python3 - "$work/$m.local.jsonl" "$work/$m.direct.jsonl" <<'EOF'
import json, sys
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()]
local, direct = load(sys.argv[1]), load(sys.argv[2])
start = max(int(next(r for r in x if r["kind"] == "list")["rv"]) for x in (local, direct))
def events(rs):
    return {(r["name"], r["rv"]) for r in rs if r["kind"] == "event" and int(r["rv"]) > start}
lost = sorted(events(direct) - events(local), key=lambda e: int(e[1]))
extra = sorted(events(local) - events(direct), key=lambda e: int(e[1]))
expired = sum(1 for r in local if r["kind"] == "expired")
print(f"{len(events(direct))} {len(lost)} {expired} {len(extra)}")
EOF
)"
  local total lost expired extra
  read -r total lost expired extra <<<"$compare"
  echo "events: kube-apiserver delivered $total for the node's pods; the node-local watcher lost $lost, had $expired 410s, $extra it alone saw"
  echo "$m $offline_listed $offline_admitted $t_listed $t_admitted $node_offline $converged $total $lost $expired" > "$work/$m.result"

  k delete namespace "$ns" --wait=false >/dev/null
  kill -TERM "$relay_pid" 2>/dev/null || true
  "$scripts/controlplane-down.sh"
}

modes=("$mode"); [[ $mode == both ]] && modes=(persist memory)
for m in "${modes[@]}"; do run_mode "$m"; done

echo
printf '%-8s | %-32s | %-34s | %-9s | %-18s | %s\n' "mode" "kubelet offline: listed, started" \
  "kubelet started all pods (s after" "Node" "converged after" "events lost of"
printf '%-8s | %-32s | %-34s | %-9s | %-18s | %s\n' "" "(within ${window}s of its restart)" \
  "its restart; upstream back at ${window}s)" "offline" "upstream restored" "delivered / 410s"
fail=0
for m in "${modes[@]}"; do
  read -r _ off_listed off_admitted t_listed t_admitted node_offline converged total lost expired < "$work/$m.result"
  printf '%-8s | %-32s | %-34s | %-9s | %-18s | %s\n' "$m" "$off_listed/$pods listed, $off_admitted/$pods started" \
    "+${t_admitted}s" "$node_offline" "+${converged}s" "$lost of $total / $expired"
  if [[ $m == persist ]]; then
    if [[ $off_admitted -lt $pods ]] || awk -v t="$t_admitted" -v l="$admit_limit" 'BEGIN { exit !(t > l) }'; then
      echo "reboot-scenario: FAIL: with persistence the kubelet did not start its pods within ${admit_limit}s offline" >&2; fail=1
    fi
    [[ $lost == 0 && $expired == 0 ]] || { echo "reboot-scenario: FAIL: the watcher lost events or got a 410" >&2; fail=1; }
  else
    [[ $off_listed == 0 && $off_admitted == 0 ]] || { echo "reboot-scenario: FAIL: without persistence the kubelet saw pods offline?" >&2; fail=1; }
  fi
  [[ $converged != - ]] || { echo "reboot-scenario: FAIL: $m did not converge" >&2; fail=1; }
done
exit "$fail"
