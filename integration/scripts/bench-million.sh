#!/usr/bin/env bash
# A million objects (issue 47, item 2): one Pods cache of MILLION_PODS
# (1,000,000) pods of about 1 KiB over MILLION_NODES (5,000) nodes, listed
# from the synthetic upstream inside the bench process (the ingest bench's,
# integration/bench/synthetic/), with watchmux under `taskset -c
# $MILLION_CPUS` (0) and the bench on MILLION_BENCH_CPUS (1). See
# integration/bench/million/main.rs for what it measures.
#
# Usage: bench-million.sh   (no cluster; about 3 minutes, 2.5 GiB of memory
# for watchmux and as much for the bench, and the persisted store, about
# 1 GiB, in .run/bench-million/persist while the run needs it)
#
# MILLION_REQUESTS (1000) a latency series, MILLION_SLOW_MIBPS (100) the slow
# reader's pace, MILLION_PHASES what follows the cold start's memory
# (latency,lists,persist; persist: the two persisted starts), MILLION_LABELS
# (2) labels a pod at the same JSON size, MILLION_SYNTHETIC=0 skips this part.
#
# MILLION_CLUSTER_PODS=N (unset: not run) adds the real API server's side:
# bench-scale.sh loads a world of N pods over SCALE_NODES (5,000) nodes into
# the test cluster (its state is replaced; the cluster's ports from
# ETCD_PORT, ETCD_PEER_PORT, APISERVER_PORT) and measures kube-apiserver's
# memory against the tier's for the same objects and one client's LIST of
# every pod from each (SCALE_PHASES=load,memory,list, SCALE_LIST_CLIENTS=1);
# then the bench's latency series (MILLION_CLUSTER_REQUESTS, 1000, a row:
# an empty namespace's LIST, node-scoped LISTs, watch starts), one after
# another on one HTTP/2 connection over TLS, straight at kube-apiserver and
# through a tier caching pods (MILLION_MODE=cluster); then the cluster is stopped (MILLION_CLUSTER_KEEP=1: left
# running; MILLION_CLUSTER_SCALE_PHASES= then skips bench-scale on the next
# run). Results in .run/bench-million/cluster.json and .run/bench-scale/.
#
# Prints the machine line (with the load average at the start and the end)
# and the Markdown tables; JSON in .run/bench-million/million.json.
listen="127.0.0.1:${BENCH_PORT:-17694}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17695}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-million"
[[ ${BENCH_KEEP:-0} == 1 || ${MILLION_SYNTHETIC:-1} == 0 ]] || rm -rf "$logs"/million.json "$logs"/persist
bench_build million "$logs"

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u '+%F %H:%M UTC');" \
  "commit $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo

status=0
if [[ ${MILLION_SYNTHETIC:-1} == 1 ]]; then
env WATCHMUX_BIN="$logs/watchmux" WATCHMUX_BENCH_PROXY="$listen" WATCHMUX_BENCH_ADMIN="$admin" \
  MILLION_CPUS="${MILLION_CPUS:-0}" MILLION_LOGS="$logs" BENCH_OUT="$logs/million.json" \
  timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-900}" \
  taskset -c "${MILLION_BENCH_CPUS:-1}" "$logs/million-bench" --bench || {
  status=$?
  echo "bench-million: the run failed (exit $status)"
}
for log in "$logs"/watchmux-*.log; do
  [[ -e $log ]] && watchmux_warnings "$log"
done
fi

# The tier for the node-scoped LISTs: pods cached, serving TLS, ready once
# they are listed (bench-lib's start_watchmux gives 30 s; 75,000 real pods
# on a busy machine took longer).
start_pods_tier() {
  RUST_LOG=warn "$logs/watchmux" --kubeconfig "$root/.run/kubeconfig" --listen "$listen" --admin-listen "$admin" \
    --cache-resources pods --cache-warm --tls-cert-file "$root/.run/cluster/apiserver.crt" \
    --tls-private-key-file "$root/.run/cluster/apiserver.key" > "$logs/watchmux-cluster.log" 2>&1 &
  wm_pid=$!
  for _ in $(seq 1 1200); do
    curl -fs "http://$admin/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$wm_pid" 2>/dev/null || { echo "bench-million: the tier exited" >&2; exit 1; }
    sleep 0.5
  done
  echo "bench-million: the tier not ready in 600 s" >&2
  exit 1
}

if [[ -n ${MILLION_CLUSTER_PODS:-} ]]; then
  export SCALE=full SCALE_NODES="${SCALE_NODES:-5000}"
  export SCALE_PODS_PER_NODE=$(( MILLION_CLUSTER_PODS / SCALE_NODES )) SCALE_LIST_CLIENTS=1 SCALE_KEEP=1
  # MILLION_CLUSTER_SCALE_PHASES (load,memory,list): bench-scale's phases;
  # empty: none (the loaded cluster is running, only the LISTs below).
  export SCALE_PHASES="${MILLION_CLUSTER_SCALE_PHASES-load,memory,list}"
  if [[ -n $SCALE_PHASES ]]; then
    echo "bench-million: the real API server with $((SCALE_NODES * SCALE_PODS_PER_NODE)) pods (bench-scale.sh)"
    bash "$scripts/bench-scale.sh" || { status=$?; echo "bench-million: bench-scale failed (exit $status)"; }
    [[ -f $root/.run/bench-scale/scale.json ]] && cp "$root/.run/bench-scale/scale.json" "$logs/cluster-scale.json"
  fi
  start_pods_tier
  bench_env
  WATCHMUX_BENCH_PROXY_TLS=1 MILLION_MODE=cluster MILLION_REQUESTS="${MILLION_CLUSTER_REQUESTS:-1000}" \
    BENCH_OUT="$logs/cluster.json" timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-900}" \
    taskset -c "${MILLION_BENCH_CPUS:-1}" "$logs/million-bench" --bench || {
    status=$?
    echo "bench-million: the cluster run failed (exit $status)"
  }
  stop_watchmux
  watchmux_warnings "$logs/watchmux-cluster.log"
  # MILLION_CLUSTER_KEEP=1 leaves the loaded cluster running.
  [[ ${MILLION_CLUSTER_KEEP:-0} == 1 ]] || bash "$scripts/cluster-down.sh" >/dev/null || true
fi
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%H:%M UTC')"
exit "$status"
