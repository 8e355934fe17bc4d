#!/usr/bin/env bash
# Restart storm, straight at kube-apiserver and through watchmux (see
# integration/bench/restart/main.rs): N reflector-shaped watchers, then
# kube-apiserver restarted with `cluster-up.sh --restart-apiserver` (once per
# side); what reaches the new API server and how long until every watcher has
# seen a write made after the restart.
#
# Usage: bench-restart.sh [N...]       (default: 1000; or RESTART_NS="...")
#
# watchmux: --cache-resources configmaps --cache-warm. JSON per N in
# .run/bench-restart/.
listen="127.0.0.1:${BENCH_PORT:-17596}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17597}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then ns=("$@"); else read -r -a ns <<< "${RESTART_NS:-1000}"; fi
logs="$root/.run/bench-restart"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/restart-*.json  # BENCH_KEEP=1: add to the last results
bench_build restart "$logs"
bench_cluster_up
machine_line
export RESTART_CMD="bash $scripts/cluster-up.sh --restart-apiserver"
for n in "${ns[@]}"; do
  run_config restart "$n" configmaps RESTART_N="$n"
done
echo
echo "bench-restart: done in ${SECONDS}s"
