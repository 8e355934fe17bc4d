#!/usr/bin/env bash
# Kubelet-shaped load, straight at kube-apiserver and through watchmux (see
# integration/bench/kubelet/main.rs): M simulated kubelets, five list+watches
# each (own pods by spec.nodeName, own Node, services, own ConfigMap and
# Secret by metadata.name), one HTTP/2 connection each.
#
# Usage: bench-kubelet.sh [M...]       (default: 100 1000; or KUBELET_MS="...")
#
# watchmux caches pods,nodes,services,configmaps,secrets (secrets are not in
# its default --cache-resources). JSON per M in .run/bench-kubelet/.
listen="127.0.0.1:${BENCH_PORT:-17594}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17595}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then ms=("$@"); else read -r -a ms <<< "${KUBELET_MS:-100 1000}"; fi
logs="$root/.run/bench-kubelet"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/kubelet-*.json  # BENCH_KEEP=1: add to the last results
bench_build kubelet "$logs"
bench_cluster_up
machine_line
for m in "${ms[@]}"; do
  run_config kubelet "$m" pods,nodes,services,configmaps,secrets KUBELET_M="$m"
done
echo
echo "bench-kubelet: done in ${SECONDS}s"
