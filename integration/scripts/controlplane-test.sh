#!/usr/bin/env bash
# Runs the control-plane scenarios (integration/cmd/cpscenario: real
# kube-scheduler, kube-controller-manager and kubemark hollow kubelets and
# kube-proxies) in each topology in turn, direct, node-local, tier and tree
# (see controlplane-up.sh), and fails on the first topology whose outcome
# differs. In every topology but direct it also restarts watchmux in the
# middle of a rollout and checks each watchmux's /metrics for traffic; in the
# tree it also stops the tier, whose node-locals must fall back to the API
# server (--upstream-fallback-servers) with every node staying Ready.
#
# Starts the test cluster (with WATCHMUX_CLUSTER_NODE_AUTHZ=1) if it is not up
# and then stops it again at the end; stops the control plane after each
# topology (controlplane-down.sh), also on failure.
#
# Usage: integration/scripts/controlplane-test.sh
#   N=2                        hollow nodes
#   TOPOLOGIES="direct node-local tier tree"
#   WATCHMUX_BIN               default target/debug/watchmux (built if missing)
#   KEEP=1                     leave the last topology running (debugging)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
n="${N:-2}"
topologies="${TOPOLOGIES:-direct node-local tier tree}"
base="${CP_PORT_BASE:-31000}"
ctl="$scripts/controlplane-ctl.sh"

"$scripts/build-controlplane.sh"
started_cluster=0
if ! "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  WATCHMUX_CLUSTER_NODE_AUTHZ=1 "$scripts/cluster-up.sh"
  started_cluster=1
fi
# The features every test step builds with (see the Makefile's test-unit): one dev build.
if [[ -z "${WATCHMUX_BIN:-}" ]]; then (cd "$root" && cargo build --locked -q --features fault-injection); fi
cleanup() {
  [[ "${KEEP:-}" == 1 ]] || "$scripts/controlplane-down.sh" >/dev/null || true
  if [[ $started_cluster == 1 && "${KEEP:-}" != 1 ]]; then "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap cleanup EXIT

summary=()
last=$((n - 1))
for topology in $topologies; do
  echo "=== controlplane-test: $topology, $n hollow nodes"
  "$scripts/controlplane-down.sh" >/dev/null
  start=$(date +%s)
  TOPOLOGY="$topology" N="$n" "$scripts/controlplane-up.sh"
  args=(-kubeconfig "$root/.run/kubeconfig" -nodes "$n" -namespace "cp-e2e-$topology"
        -stop-node "hollow-node-$last"
        -stop-kubelet-cmd "$ctl stop kubelet-hollow-node-$last"
        -start-kubelet-cmd "$ctl start kubelet-hollow-node-$last")
  admins=()
  case "$topology" in
    node-local)
      args+=(-restart-cmd "$ctl restart watchmux-hollow-node-0" -resumed-admin "http://127.0.0.1:$((base + 103))") ;;
    tier)
      args+=(-restart-cmd "$ctl restart watchmux-tier") ;;
    tree)
      args+=(-restart-cmd "$ctl restart watchmux-tier && $ctl restart watchmux-hollow-node-0"
             -stop-upstream-cmd "$ctl stop watchmux-tier" -start-upstream-cmd "$ctl start watchmux-tier"
             -upstream-admin "http://127.0.0.1:$((base + 11))") ;;
  esac
  if [[ $topology == tier || $topology == tree ]]; then admins+=("http://127.0.0.1:$((base + 11))"); fi
  if [[ $topology == node-local || $topology == tree ]]; then
    for i in $(seq 0 "$last"); do admins+=("http://127.0.0.1:$((base + 103 + 10 * i))"); done
  fi
  if [[ ${#admins[@]} -gt 0 ]]; then args+=(-watchmux-admin "$(IFS=,; echo "${admins[*]}")"); fi
  if ! "$root/.run/bin/cpscenario" "${args[@]}"; then
    echo "controlplane-test: $topology FAILED; logs in $root/.run/controlplane/logs" >&2
    exit 1
  fi
  summary+=("$topology: passed in $(( $(date +%s) - start ))s")
done
printf 'controlplane-test: %s\n' "${summary[@]}"
