#!/usr/bin/env bash
# Fairness under a LIST storm (issue 26 item 3; integration/bench/kubelet/storm.rs):
# M kubelet-shaped clients (as system:node:<name>) start while one client (an
# ordinary user) runs KUBELET_NOISY concurrent LISTs of every pod
# (resourceVersion=0; KUBELET_EXTRA_PODS extra pods, created once and reused),
# straight at kube-apiserver and through watchmux in delegated mode, with
# fairness on (the default --fairness-seats) and off (--fairness-seats 0).
#
# Usage: bench-fairness.sh [M]     (default 1000; KUBELET_NOISY=100, KUBELET_EXTRA_PODS=10000)
#
# Four configurations, each with a fresh watchmux (so that no review or
# token cache of one warms the next): kube-apiserver quiet then noisy;
# watchmux quiet; watchmux noisy; watchmux noisy with fairness off. JSON in
# .run/bench-fairness/, and a table of the four at the end.
listen="127.0.0.1:${BENCH_PORT:-17596}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17597}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
m="${1:-${KUBELET_M:-1000}}"
logs="$root/.run/bench-fairness"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/kubelet-*.json
bench_build kubelet "$logs"
bench_cluster_up
machine_line
resources=pods,nodes,services,configmaps,secrets
storm=(KUBELET_M="$m" KUBELET_NOISY="${KUBELET_NOISY:-100}" KUBELET_EXTRA_PODS="${KUBELET_EXTRA_PODS:-10000}")
# Delegated: the kubelets and the noisy client are told apart by identity,
# as kube-apiserver tells them apart (plain HTTP on loopback: a warning).
delegated="--auth-mode delegated ${WATCHMUX_ARGS:-}"
WATCHMUX_ARGS="$delegated" run_config kubelet direct "$resources" "${storm[@]}" KUBELET_SIDES=direct
WATCHMUX_ARGS="$delegated" run_config kubelet watchmux-quiet "$resources" "${storm[@]}" \
  KUBELET_SIDES=watchmux KUBELET_CONDITIONS=quiet KUBELET_FAIRNESS_LABEL="fairness on"
WATCHMUX_ARGS="$delegated" run_config kubelet watchmux-noisy "$resources" "${storm[@]}" \
  KUBELET_SIDES=watchmux KUBELET_CONDITIONS=noisy KUBELET_FAIRNESS_LABEL="fairness on"
WATCHMUX_ARGS="$delegated --fairness-seats 0" run_config kubelet watchmux-noisy-unfair "$resources" "${storm[@]}" \
  KUBELET_SIDES=watchmux KUBELET_CONDITIONS=noisy KUBELET_FAIRNESS_LABEL="fairness off"

echo
echo "### All four, M=$m"
echo
echo "| side, condition | kubelets synced / failed | time to synced p50 / p99 / max, ms | all synced in, s | kubelets' 429s | noisy LISTs read in full / refused; MiB read | kube-apiserver / watchmux / bench CPU, ms |"
echo "|---|---|---|---|---|---|---|"
for tag in direct watchmux-quiet watchmux-noisy watchmux-noisy-unfair; do
  f="$logs/kubelet-$tag.json"
  [[ -f $f ]] || { echo "| $tag | (no results) ||||||"; continue; }
  jq -r '.runs[] | "| \(.side), \(.condition)\(if .fairness != "" then ", " + .fairness else "" end) | \(.synced) / \(.failed) | \(.time_to_synced_ms | [.p50, .p99, .max] | map(if . == null then "–" else (. | round | tostring) end) | join(" / ")) | \(.all_synced_secs * 10 | round / 10) | \(.kubelet_429) | \(.noisy_ok) / \(.noisy_refused); \(.noisy_bytes / 1048576 | round) | \(.apiserver_cpu_ms | round) / \(if .side == "direct" then "–" else (.server_cpu_ms | round | tostring) end) / \(.bench_cpu_ms | round) |"' "$f"
done
echo
echo "bench-fairness: done in ${SECONDS}s"
