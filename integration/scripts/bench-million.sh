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
# then MILLION_CLUSTER_REQUESTS (200) node-scoped LISTs and as many LISTs of
# an empty namespace (the floor), one after another on one HTTP/2
# connection (curl, TLS), straight at kube-apiserver and through a tier
# caching pods; then the cluster is stopped (MILLION_CLUSTER_KEEP=1: left
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

# percentiles <file of seconds, one a line>: p50 p99 max, in µs.
percentiles() {
  sort -g "$1" | awk '{v[NR] = $1 * 1e6} END {
    i50 = int((NR - 1) * 0.5 + 0.5) + 1; i99 = int((NR - 1) * 0.99 + 0.5) + 1
    printf "%.0f %.0f %.0f", v[i50], v[i99], v[NR] }'
}

# timed_gets <base URL> <path template with NODE> <n> <out>: n GETs one after
# another on one HTTP/2 connection, each's time_total (s) a line; the
# answers that were not 200 are counted on stderr.
timed_gets() {
  local base="$1" template="$2" n="$3" out="$4" args=() i
  for ((i = 0; i < n; i++)); do
    args+=(-o /dev/null "$base${template//NODE/$(printf 'node-%05d' $((i * 37 % SCALE_NODES)))}")
  done
  curl -s --http2 --cacert "$root/.run/cluster/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -w '%{http_code} %{time_total}\n' "${args[@]}" > "$out.raw"
  awk -v out="$out" '$1 != 200 {bad++} {print $2 > out} END {if (bad) print bad " not 200 in " out > "/dev/stderr"}' "$out.raw"
}

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
  # shellcheck disable=SC1091
  source "$root/.run/cluster/env"
  n="${MILLION_CLUSTER_REQUESTS:-200}"
  direct="https://127.0.0.1:${APISERVER_PORT:-16443}"
  node_path="/api/v1/pods?fieldSelector=spec.nodeName%3DNODE&resourceVersion=0"
  empty_path="/api/v1/namespaces/million-empty/pods?resourceVersion=0"
  timed_gets "$direct" "$node_path" "$n" "$logs/cluster-direct-node.txt"
  timed_gets "$direct" "$empty_path" "$n" "$logs/cluster-direct-empty.txt"
  api_rss=$(( $(awk '/^VmRSS:/{print $2}' "/proc/$(cat "$root/.run/cluster/apiserver.pid")/status") * 1024 ))
  start_pods_tier
  wm_rss=$(( $(awk '/^VmRSS:/{print $2}' "/proc/$wm_pid/status") * 1024 ))
  timed_gets "https://$listen" "$node_path" "$n" "$logs/cluster-watchmux-node.txt"
  timed_gets "https://$listen" "$empty_path" "$n" "$logs/cluster-watchmux-empty.txt"
  stop_watchmux
  read -r dn50 dn99 dnmax <<< "$(percentiles "$logs/cluster-direct-node.txt")"
  read -r de50 de99 demax <<< "$(percentiles "$logs/cluster-direct-empty.txt")"
  read -r wn50 wn99 wnmax <<< "$(percentiles "$logs/cluster-watchmux-node.txt")"
  read -r we50 we99 wemax <<< "$(percentiles "$logs/cluster-watchmux-empty.txt")"
  echo
  echo "### The real API server, $((SCALE_NODES * SCALE_PODS_PER_NODE)) pods: $n requests one after another on one HTTP/2 connection (curl, TLS)"
  echo
  echo "| request, resourceVersion=0 | straight at kube-apiserver p50 / p99 / max, µs | through watchmux (pods cached) |"
  echo "|---|---|---|"
  echo "| node-scoped LIST ($SCALE_PODS_PER_NODE pods) | $dn50 / $dn99 / $dnmax | $wn50 / $wn99 / $wnmax |"
  echo "| an empty namespace's LIST (the floor) | $de50 / $de99 / $demax | $we50 / $we99 / $wemax |"
  echo "| RSS after the requests (kube-apiserver: every resource; watchmux: pods alone) | $(( api_rss / 1048576 )) MiB | $(( wm_rss / 1048576 )) MiB |"
  jq -n --argjson pods "$((SCALE_NODES * SCALE_PODS_PER_NODE))" --argjson n "$n" \
    --argjson d "[$dn50,$dn99,$dnmax,$de50,$de99,$demax]" --argjson w "[$wn50,$wn99,$wnmax,$we50,$we99,$wemax]" \
    --argjson api_rss "$api_rss" --argjson wm_rss "$wm_rss" \
    '{pods: $pods, requests: $n, apiserver_rss_bytes: $api_rss, watchmux_pods_rss_bytes: $wm_rss,
      node_list_us: {direct: {p50: $d[0], p99: $d[1], max: $d[2]}, watchmux: {p50: $w[0], p99: $w[1], max: $w[2]}},
      empty_list_us: {direct: {p50: $d[3], p99: $d[4], max: $d[5]}, watchmux: {p50: $w[3], p99: $w[4], max: $w[5]}}}' \
    > "$logs/cluster.json"
  # MILLION_CLUSTER_KEEP=1 leaves the loaded cluster running.
  [[ ${MILLION_CLUSTER_KEEP:-0} == 1 ]] || bash "$scripts/cluster-down.sh" >/dev/null || true
fi
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%H:%M UTC')"
exit "$status"
