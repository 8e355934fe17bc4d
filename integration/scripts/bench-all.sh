#!/usr/bin/env bash
# `make bench`: every benchmark against one test cluster (started here if it
# is not running, stopped at the end only in that case), then the plots.
# Output: Markdown on stdout (tee it), JSON in .run/bench-*/, PNGs in docs/img/.
#
# The matrix (defaults: the full set, about 30 minutes on 2 cores):
#   BENCH_SUITES   passthrough fanout kubelet restart auth ingest million cores
#                  (cores last: its storm loads its own world into the cluster)
#   FANOUT_NS      100 1000 10000      watchers, HTTP/2
#   FANOUT_H1_NS   1000                of those, also one HTTP/1.1 connection per watcher (empty: none)
#   FANOUT_RATES   10 100 1000         changes a second
#   FANOUT_SIZES   1024 20480          object bytes
#   FANOUT_TLS     1                   watchmux over TLS as kube-apiserver (0: plain text)
#   FANOUT_SECONDS 5                   writing time per cell (cells are also bounded in
#                                      deliveries and bytes; see integration/bench/fanout/main.rs)
#   KUBELET_MS     100 1000            simulated kubelets
#   RESTART_NS     1000                watchers through the restart storm
#   WATCHMUX_ARGS  (none)              extra flags for every watchmux started, e.g. --h2-write-batching=false
# BENCH_KEEP=1 keeps earlier JSON results (the plots then show both). A quick subset, e.g.:
#   FANOUT_NS=100 FANOUT_H1_NS= FANOUT_RATES=10 KUBELET_MS=100 RESTART_NS=100 make bench
#
# Ports: the cluster's from ETCD_PORT, ETCD_PEER_PORT, APISERVER_PORT (see
# cluster-up.sh); watchmux's from BENCH_PORT / BENCH_ADMIN_PORT per script.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"
started_cluster=0
if ! bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  started_cluster=1
  bash "$scripts/cluster-up.sh" >/dev/null
fi
trap '[[ $started_cluster == 1 ]] && bash "$scripts/cluster-down.sh" >/dev/null || true' EXIT
read -r -a suites <<< "${BENCH_SUITES:-passthrough fanout kubelet restart auth ingest million cores}"
status=0
for s in "${suites[@]}"; do
  echo
  echo "## bench-$s"
  echo
  bash "$scripts/bench-$s.sh" || { echo "bench-all: bench-$s failed"; status=1; }
done
bash "$scripts/bench-plots.sh" || status=1
echo
echo "bench-all: done in ${SECONDS}s"
exit "$status"
