#!/usr/bin/env bash
# Stops what controlplane-up.sh started (hollow kubelets and proxies, the
# scheduler, the controller-manager, watchmux processes), by the pid files in
# .run/controlplane/pids, signalling only a pid whose command line is still
# the binary it started (pids get reused). TERM, up to 10 s, then KILL. Then,
# if the test cluster is up, deletes the hollow Node objects and the leader
# election leases, so that the next topology starts from the same state. Keeps
# certificates and logs. Idempotent. The test cluster itself stays up
# (cluster-down.sh stops it).
#
# Usage: integration/scripts/controlplane-down.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cp="$root/.run/controlplane"
cluster="$root/.run/cluster"
[[ -d "$cp/pids" ]] || exit 0

alive_as() {  # alive_as <pid> <argv0 suffix or env>
  local argv
  argv="$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)" || return 1
  [[ "$argv" == *"$2"* ]]
}
pids=()
for f in "$cp"/pids/*.pid; do
  [[ -f "$f" ]] || continue
  pid="$(cat "$f")"
  case "$(basename "$f" .pid)" in
    kubelet-*|proxy-*) want=kubemark ;;
    watchmux-*) want=watchmux ;;
    *) want="$(basename "$f" .pid)" ;;
  esac
  if alive_as "$pid" "$want"; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid:$want"); fi
  rm -f "$f"
done
for _ in $(seq 1 40); do
  left=0
  for p in "${pids[@]}"; do alive_as "${p%%:*}" "${p#*:}" && left=1; done
  [[ $left == 0 ]] && break
  sleep 0.25
done
for p in "${pids[@]}"; do
  if alive_as "${p%%:*}" "${p#*:}"; then
    echo "controlplane-down: ${p#*:} (pid ${p%%:*}) ignored TERM, killing" >&2
    kill -KILL "${p%%:*}" 2>/dev/null || true
  fi
done
echo "controlplane-down: stopped ${#pids[@]} processes"

if "$root/integration/scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  # shellcheck disable=SC1091
  source "$cluster/env"
  k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" --request-timeout=20s "$@"; }
  nodes="$(k get nodes -o name 2>/dev/null | grep '^node/hollow-node-' || true)"
  [[ -z "$nodes" ]] || k delete --wait=false $nodes >/dev/null || true
  k -n kube-node-lease delete leases --all --wait=false >/dev/null 2>&1 || true
  k -n kube-system delete lease kube-scheduler kube-controller-manager --ignore-not-found --wait=false >/dev/null || true
fi
rm -rf "$cp/nodes" "$cp/topology"
