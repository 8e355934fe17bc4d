#!/usr/bin/env bash
# A cluster at the scalability limits on one machine (issue 28;
# integration/bench/scale): kube-apiserver with etcd filled with SCALE's
# nodes, pods, services, EndpointSlices, ConfigMaps and Secrets, then side by
# side, straight at kube-apiserver and through one watchmux tier caching all
# of it (over TLS, as kube-apiserver serves): memory per cached object, LISTs
# of every pod, and a storm of kubelet-shaped clients.
#
# Usage: bench-scale.sh      SCALE=full (default): 5,000 nodes, 150,000 pods,
#                            1,000 services, 100 namespaces
#                            SCALE=light: 500 nodes, 15,000 pods, 100 services, 20 namespaces
#                            SCALE=tiny: 50 nodes, 500 pods (a smoke run)
#   SCALE_PHASES  load,memory,list,storm     (the load is skipped when the
#                 running cluster already holds this SCALE: .run/cluster/scale)
#   SCALE_KEEP=1  leaves the loaded cluster running for the next run
#   SCALE_RESTART_CMD  how the storm restarts kube-apiserver under the synced
#                 kubelets (default: cluster-up.sh --restart-apiserver; empty: none)
#   SCALE_WATCHMUX_ARGS  more flags for the tier (an A/B of one setting)
#   SCALE_TLS_CERT, SCALE_TLS_KEY  the tier's serving certificate and key
#                 (default kube-apiserver's, RSA 2048; the kubelets trust
#                 the cluster's CA, so sign another with it: an A/B of the
#                 key type's handshake cost)
#   SCALE_SIDES   direct,watchmux (default); add nodelocal for side (c): the
#                 first SCALE_NODE_LOCALS (20) kubelets behind node-local
#                 watchmux processes in front of the tier, started with the
#                 storm (integration/bench/scale/nodelocal.rs); they take
#                 watch-lists as the chart's tree does, SCALE_NODE_LOCAL_WATCH_LIST=0
#                 paginated consistent LISTs
#   SCALE_TIER_CPUS    taskset core list the tier starts on (its runtime
#                 sizes its worker threads to them); unset: every core
#   SCALE_CLIENT_CPUS  the same for the bench's clients, and kube-apiserver
#                 and etcd are moved there (taskset -ap) too: make bench-cores
#                 puts the tier on core 0 and everything else on core 1
#   and the SCALE_* knobs of integration/bench/scale/main.rs.
#
# The cluster: its own fresh start (the test cluster's state is replaced)
# with etcd's quota at 8 GiB and kube-apiserver's in-flight limits raised as
# large clusters run them (--max-requests-inflight=2000,
# --max-mutating-requests-inflight=1000), the same for both sides. Results:
# .run/bench-scale/ (scale.json, kept as scale-<SCALE>-<nodes>.json for
# make bench-plots; the Markdown on stdout, logs).
listen="127.0.0.1:${BENCH_PORT:-17692}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17693}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-scale"
mkdir -p "$logs"

case "${SCALE:-full}" in
  full)  defaults=(5000 30 1000 100) ;;
  light) defaults=(500 30 100 20) ;;
  tiny)  defaults=(50 10 10 5) ;;
  *) echo "bench-scale: SCALE is full, light or tiny" >&2; exit 2 ;;
esac
export SCALE_NODES="${SCALE_NODES:-${defaults[0]}}" SCALE_PODS_PER_NODE="${SCALE_PODS_PER_NODE:-${defaults[1]}}" \
  SCALE_SERVICES="${SCALE_SERVICES:-${defaults[2]}}" SCALE_NAMESPACES="${SCALE_NAMESPACES:-${defaults[3]}}"
world="$SCALE_NODES $SCALE_PODS_PER_NODE $SCALE_SERVICES $SCALE_NAMESPACES ${SCALE_PER_NAMESPACE:-10}"
phases="${SCALE_PHASES:-load,memory,list,storm}"

bench_build scale "$logs"

export CLUSTER_ETCD_ARGS="--quota-backend-bytes=8589934592"
export CLUSTER_APISERVER_ARGS="--max-requests-inflight=2000 --max-mutating-requests-inflight=1000"
marker="$root/.run/cluster/scale"
if bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1 && [[ -f $marker && "$(cat "$marker")" == "$world" ]]; then
  echo "bench-scale: the running cluster holds this world ($world): no load"
  phases="${phases//load/}"
  how="reused: it already held this world"
else
  bash "$scripts/cluster-down.sh" >/dev/null || true
  bash "$scripts/cluster-up.sh" >/dev/null
  rm -f "$marker"
  [[ $phases == *load* ]] || { echo "bench-scale: a fresh cluster needs the load phase" >&2; exit 1; }
  how="started fresh by this run"
fi
# Stopped at the end unless SCALE_KEEP=1 (bench-lib's cleanup reads this).
started_cluster=1
[[ ${SCALE_KEEP:-0} == 1 ]] && started_cluster=0
machine_line | sed "s/^cluster: .*/cluster: $how/" | tee "$logs/machine.txt"
bench_env

tls=(--tls-cert-file "${SCALE_TLS_CERT:-$root/.run/cluster/apiserver.crt}"
  --tls-private-key-file "${SCALE_TLS_KEY:-$root/.run/cluster/apiserver.key}")
export WATCHMUX_BENCH_PROXY_TLS=1

# wait_ready <seconds>: watchmux's /readyz (its caches synced), bounded.
wait_ready() {
  local limit=$(( SECONDS + $1 ))
  until curl -fs "http://$admin/readyz" >/dev/null 2>&1; do
    kill -0 "$wm_pid" 2>/dev/null || { echo "bench-scale: watchmux exited" >&2; tail -20 "$2" >&2; exit 1; }
    (( SECONDS < limit )) || { echo "bench-scale: watchmux not ready in $1 s" >&2; tail -20 "$2" >&2; exit 1; }
    sleep 0.2
  done
}
read -ra extra_args <<< "${SCALE_WATCHMUX_ARGS:-}"
tier_pin=() client_pin=()
[[ -z ${SCALE_TIER_CPUS:-} ]] || tier_pin=(taskset -c "$SCALE_TIER_CPUS")
[[ -z ${SCALE_CLIENT_CPUS:-} ]] || client_pin=(taskset -c "$SCALE_CLIENT_CPUS")
start_tier() {  # start_tier <log> <resources>
  RUST_LOG=warn "${tier_pin[@]}" "$logs/watchmux" --kubeconfig "$root/.run/kubeconfig" --listen "$listen" --admin-listen "$admin" \
    "${tls[@]}" --cache-resources "$2" --cache-warm "${extra_args[@]}" > "$1" 2>&1 &
  wm_pid=$!
}

if [[ $phases == *load* ]]; then
  # The load alone (no watchmux yet: its caches would follow every write).
  SCALE_PHASES=load BENCH_OUT="$logs/load.json" WATCHMUX_BENCH_PROXY_PID=0 \
    timeout --signal=INT --kill-after=10 "${SCALE_LOAD_TIMEOUT:-3600}" "$logs/scale-bench" --bench
  echo "$world" > "$marker"
  phases="${phases//load/}"
fi

# The cluster beside the clients for the storm (after the load, which would
# only be slower for it); it stays there until the next run moves it.
if [[ -n ${SCALE_CLIENT_CPUS:-} ]]; then
  for p in apiserver etcd; do
    taskset -apc "$SCALE_CLIENT_CPUS" "$(cat "$root/.run/cluster/$p.pid")" >/dev/null
  done
fi

# An empty watchmux (one small resource cached) for the baseline RSS.
start_tier "$logs/watchmux-empty.log" leases
wait_ready 60 "$logs/watchmux-empty.log"
sleep 2
base_rss=$(( $(awk '/^VmRSS:/{print $2}' "/proc/$wm_pid/status") * 1024 ))
stop_watchmux

start_tier "$logs/watchmux.log" pods,nodes,services,endpointslices,configmaps,secrets
began=$SECONDS
wait_ready "${SCALE_SYNC_TIMEOUT:-900}" "$logs/watchmux.log"
echo "bench-scale: the tier synced every cache in $(( SECONDS - began )) s"
bench_env
# The storm's last step restarts kube-apiserver under the synced kubelets
# (SCALE_RESTART_CMD= for none).
export SCALE_RESTART_CMD="${SCALE_RESTART_CMD-bash $scripts/cluster-up.sh --restart-apiserver >/dev/null}"
# Side (c): the node-locals' upstream is the tier, over TLS as in the chart.
if [[ ${SCALE_SIDES:-} == *nodelocal* ]]; then
  sed "s|^    server: .*|    server: https://$listen|" "$root/.run/kubeconfig" > "$logs/nodelocal.kubeconfig"
  export SCALE_NODE_LOCAL_BIN="$logs/watchmux" SCALE_NODE_LOCAL_KUBECONFIG="$logs/nodelocal.kubeconfig" \
    SCALE_NODE_LOCAL_TLS="${tls[1]}:${tls[3]}" SCALE_NODE_LOCAL_LOGS="$logs"
fi
SCALE_PHASES="$phases" SCALE_WATCHMUX_BASE_RSS="$base_rss" BENCH_OUT="$logs/scale.json" \
  timeout --signal=INT --kill-after=10 "${SCALE_RUN_TIMEOUT:-5400}" "${client_pin[@]}" "$logs/scale-bench" --bench ||
  echo "bench-scale: the run failed (exit $?); watchmux alive: $(kill -0 "$wm_pid" 2>/dev/null && echo yes || echo no)"
stop_watchmux
watchmux_warnings "$logs/watchmux.log"
# Kept by world size, for make bench-plots (storm and memory by object count).
[[ -f $logs/scale.json ]] && cp "$logs/scale.json" "$logs/scale-${SCALE:-full}-${SCALE_NODES}.json"
echo
echo "bench-scale: done in ${SECONDS}s"
