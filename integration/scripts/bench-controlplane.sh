#!/usr/bin/env bash
# Measures what the real control plane and N kubemark hollow nodes cost the
# API server in each topology (direct, node-local, tree; see
# controlplane-up.sh), side by side in one run (issue 13):
#   - WATCH requests started and LIST requests the API server received
#     (apiserver_request_total, apiserver_longrunning_requests), and the watch
#     events it sent (apiserver_watch_events_total), during start-up (until
#     every node is Ready) and during a rollout (a Deployment of PODS_PER_NODE
#     pods a node, until every pod is Running);
#   - watches open at the API server after the rollout;
#   - the API server's CPU seconds (/proc utime+stime) in each phase and its
#     RSS at the end of each phase; watchmux's CPU seconds and RSS, all
#     watchmux processes summed;
#   - the time until every pod is Running (cpscenario's rollout step);
#   - consistent reads (LIST/GET without resourceVersion) the watchmux caches
#     proved fresh, and those that fell back to their upstream.
# The API server is restarted before each topology (same etcd), so that its
# RSS and its watch cache start from the same place.
#
# Results: a table on stdout and in .run/bench-controlplane/results.tsv.
#
# Usage: integration/scripts/bench-controlplane.sh
#   N=10                       hollow nodes
#   PODS_PER_NODE=5
#   TOPOLOGIES="direct node-local tree"
#   WATCHMUX_BIN               default target/release/watchmux (built if missing)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
n="${N:-10}"
per_node="${PODS_PER_NODE:-5}"
topologies="${TOPOLOGIES:-direct node-local tree}"
out="$root/.run/bench-controlplane"
export WATCHMUX_BIN="${WATCHMUX_BIN:-$root/target/release/watchmux}"
export WATCHMUX_CLUSTER_NODE_AUTHZ=1
mkdir -p "$out"

"$scripts/build-controlplane.sh"
[[ -x "$WATCHMUX_BIN" ]] || (cd "$root" && cargo build --locked --release)
started_cluster=0
if ! "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  "$scripts/cluster-up.sh"; started_cluster=1
fi
cleanup() {
  "$scripts/controlplane-down.sh" >/dev/null || true
  if [[ $started_cluster == 1 ]]; then "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap cleanup EXIT
# shellcheck disable=SC1091
source "$root/.run/cluster/env"
clk="$(getconf CLK_TCK)"

apimetrics() {
  curl -fsS --max-time 10 --cacert "$CA_CERT" -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/metrics"
}
# snap: snapv=(watches started so far, LISTs, watch events sent, API server
# CPU seconds, watches open now). A watch is counted by apiserver_request_total
# only when it ends, so started = ended + open.
snap() {
  local m
  m="$(apimetrics)"
  snapv=($(awk '
    /^apiserver_request_total\{/ && /verb="WATCH"/ {ended += $NF}
    /^apiserver_request_total\{/ && /verb="LIST"/ {lists += $NF}
    /^apiserver_watch_events_total\{/ {events += $NF}
    /^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {open += $NF}
    END {printf "%d %d %d %d", ended + open, lists, events, open}' <<<"$m") "$(cpu_s "$(api_pid)")")
  snapv=("${snapv[0]}" "${snapv[1]}" "${snapv[2]}" "${snapv[4]}" "${snapv[3]}")
}
delta() {  # delta <array a> <array b> <index>: b[i] - a[i]
  local -n a="$1" b="$2"
  awk -v x="${a[$3]}" -v y="${b[$3]}" 'BEGIN {d = y - x; if (d == int(d)) printf "%d", d; else printf "%.1f", d}'
}
cpu_s() {  # cpu_s <pid...>: utime+stime seconds summed
  local t=0 p f
  for p in "$@"; do
    f="$(cat "/proc/$p/stat" 2>/dev/null)" || continue
    f="${f##*) }"
    t=$(( t + $(awk '{print $12 + $13}' <<<"$f") ))
  done
  awk -v t="$t" -v c="$clk" 'BEGIN {printf "%.1f", t / c}'
}
rss_mb() {  # rss_mb <pid...>: VmRSS summed, MiB
  local kb=0 p v
  for p in "$@"; do
    v="$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null)" || continue
    kb=$(( kb + ${v:-0} ))
  done
  echo $(( kb / 1024 ))
}
api_pid() { cat "$root/.run/cluster/apiserver.pid"; }
# wm_reads <result>: consistent reads of every watchmux, success or fallback.
wm_reads() {
  local f t=0 port
  for f in "$root"/.run/controlplane/cmds/watchmux-*; do
    [[ -f "$f" ]] || continue
    port="$(grep -o -- '--admin-listen=[^ ]*' "$f" | cut -d= -f2)"
    t=$(( t + $(curl -fsS --max-time 5 "http://$port/metrics" | awk -v r="$1" '/^watchmux_watch_cache_consistent_read_total\{/ && index($0, "result=\"" r "\"") {s += $NF} END {printf "%d", s}') ))
  done
  echo "$t"
}
wm_pids() { local f; for f in "$root"/.run/controlplane/pids/watchmux-*.pid; do [[ -f "$f" ]] && cat "$f"; done; true; }

printf 'topology\tN\tpods\tstartup_s\tstartup_watches\tstartup_lists\tstartup_watch_events\tstartup_api_cpu_s\trollout_s\trollout_watches\trollout_lists\trollout_watch_events\trollout_api_cpu_s\topen_watches\tapi_rss_mb\twatchmux_cpu_s\twatchmux_rss_mb\tconsistent_ok\tconsistent_fallback\n' > "$out/results.tsv"
for topology in $topologies; do
  echo "=== bench-controlplane: $topology, $n hollow nodes, $per_node pods a node"
  "$scripts/controlplane-down.sh" >/dev/null
  "$scripts/cluster-up.sh" --restart-apiserver >/dev/null
  sleep 5   # let the restarted API server's own start-up requests settle
  snap; s0=("${snapv[@]}")
  t0=$(date +%s.%N)
  # The tree as its published figures were taken: the control plane through the tier too.
  TREE_CONTROL_PLANE=tier CP_TIMEOUT=300 TOPOLOGY="$topology" N="$n" "$scripts/controlplane-up.sh" >/dev/null
  t1=$(date +%s.%N)
  snap; s1=("${snapv[@]}")
  "$root/.run/bin/cpscenario" -kubeconfig "$KUBECONFIG_PATH" -nodes "$n" -pods-per-node "$per_node" \
    -namespace "bench-$topology" -only-rollout -step-timeout 300s | tee "$out/$topology.log"
  rollout="$(awk '/Deployment of .* Running/ {print $(NF)}' "$out/$topology.log" | tr -d s)"
  snap; s2=("${snapv[@]}")
  # shellcheck disable=SC2046
  printf '%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\n' "$topology" "$n" $((n * per_node)) \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" "$(delta s0 s1 0)" "$(delta s0 s1 1)" "$(delta s0 s1 2)" "$(delta s0 s1 3)" \
    "$rollout" "$(delta s1 s2 0)" "$(delta s1 s2 1)" "$(delta s1 s2 2)" "$(delta s1 s2 3)" \
    "${s2[4]}" "$(rss_mb "$(api_pid)")" "$(cpu_s $(wm_pids))" "$(rss_mb $(wm_pids))" \
    "$(wm_reads success)" "$(wm_reads fallback)" >> "$out/results.tsv"
done
"$scripts/controlplane-down.sh" >/dev/null
column -t -s $'\t' "$out/results.tsv"
