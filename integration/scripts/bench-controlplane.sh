#!/usr/bin/env bash
# Measures what the real control plane and N kubemark hollow nodes cost the
# API server in each topology (direct, node-local, tree; see
# controlplane-up.sh), side by side in one run (issue 13):
#   - WATCH and LIST requests the API server received (apiserver_request_total
#     deltas) during start-up (until every node is Ready) and during a rollout
#     (a Deployment of PODS_PER_NODE pods a node, until every pod is Running);
#   - watches open at the API server after the rollout
#     (apiserver_longrunning_requests{verb="WATCH"});
#   - the API server's CPU seconds (/proc utime+stime) in each phase and its
#     RSS at the end of each phase; watchmux's CPU seconds and RSS, all
#     watchmux processes summed;
#   - the time until every pod is Running (cpscenario's rollout step).
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
# reqs <verb>: apiserver_request_total summed over everything for that verb.
reqs() {
  apimetrics | awk -v v="$1" '/^apiserver_request_total\{/ && index($0, "verb=\"" v "\"") {s += $NF} END {printf "%d", s}'
}
open_watches() {
  apimetrics | awk '/^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {s += $NF} END {printf "%d", s}'
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
wm_pids() { local f; for f in "$root"/.run/controlplane/pids/watchmux-*.pid; do [[ -f "$f" ]] && cat "$f"; done; true; }

printf 'topology\tN\tpods\tstartup_s\tstartup_watch\tstartup_list\tstartup_api_cpu_s\trollout_s\trollout_watch\trollout_list\trollout_api_cpu_s\topen_watches\tapi_rss_mb\twatchmux_cpu_s\twatchmux_rss_mb\n' > "$out/results.tsv"
for topology in $topologies; do
  echo "=== bench-controlplane: $topology, $n hollow nodes, $per_node pods a node"
  "$scripts/controlplane-down.sh" >/dev/null
  "$scripts/cluster-up.sh" --restart-apiserver >/dev/null
  sleep 5   # let the restarted API server's own start-up requests settle
  w0=$(reqs WATCH); l0=$(reqs LIST); c0=$(cpu_s "$(api_pid)")
  t0=$(date +%s.%N)
  CP_TIMEOUT=300 TOPOLOGY="$topology" N="$n" "$scripts/controlplane-up.sh" >/dev/null
  t1=$(date +%s.%N)
  w1=$(reqs WATCH); l1=$(reqs LIST); c1=$(cpu_s "$(api_pid)")
  "$root/.run/bin/cpscenario" -kubeconfig "$KUBECONFIG_PATH" -nodes "$n" -pods-per-node "$per_node" \
    -namespace "bench-$topology" -only-rollout -step-timeout 300s | tee "$out/$topology.log"
  rollout="$(awk '/Deployment of .* Running/ {print $(NF)}' "$out/$topology.log" | tr -d s)"
  w2=$(reqs WATCH); l2=$(reqs LIST); c2=$(cpu_s "$(api_pid)")
  # shellcheck disable=SC2046
  printf '%s\t%s\t%s\t%.1f\t%s\t%s\t%.1f\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\n' "$topology" "$n" $((n * per_node)) \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" $((w1 - w0)) $((l1 - l0)) "$(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}')" \
    "$rollout" $((w2 - w1)) $((l2 - l1)) "$(awk -v a="$c1" -v b="$c2" 'BEGIN {print b - a}')" \
    "$(open_watches)" "$(rss_mb "$(api_pid)")" "$(cpu_s $(wm_pids))" "$(rss_mb $(wm_pids))" >> "$out/results.tsv"
done
"$scripts/controlplane-down.sh" >/dev/null
column -t -s $'\t' "$out/results.tsv"
