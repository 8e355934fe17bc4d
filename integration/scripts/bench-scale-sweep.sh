#!/usr/bin/env bash
# Where one watchmux tier stops keeping up (issue 28 item 5): the kubelet
# storm through the tier alone at a rising number of kubelets, on one loaded
# world, each step with a fresh tier (its peak RSS is that step's). Not in
# make test.
#
#   SWEEP_KUBELETS   the steps (default 1000 2000 3000 4000 5000; at most the
#                    world's nodes: a kubelet is its node)
#   and bench-scale.sh's knobs; the world defaults to SCALE=full with 10 pods
#   a node (SCALE_PODS_PER_NODE), loaded by the first step unless the running
#   cluster already holds it, and kept for the next run.
#
# Results: .run/bench-scale/sweep-<kubelets>.json (make bench-plots draws
# docs/img/bench-scale-limit.png from them), each step's Markdown on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
logs="$root/.run/bench-scale"
read -ra steps <<< "${SWEEP_KUBELETS:-1000 2000 3000 4000 5000}"
export SCALE="${SCALE:-full}" SCALE_PODS_PER_NODE="${SCALE_PODS_PER_NODE:-10}" SCALE_KEEP=1 \
  SCALE_SIDES=watchmux SCALE_CHURN_SECONDS=0 SCALE_RESTART_CMD=
phases="load,storm"
for n in "${steps[@]}"; do
  (( n > 0 )) || { echo "bench-scale-sweep: $n is not a number of kubelets" >&2; exit 2; }
  echo "bench-scale-sweep: $n kubelets"
  rm -f "$logs/scale.json"
  SCALE_PHASES="$phases" SCALE_KUBELETS="$n" bash "$root/integration/scripts/bench-scale.sh"
  [[ -f $logs/scale.json ]] || { echo "bench-scale-sweep: no result at $n kubelets" >&2; exit 1; }
  cp "$logs/scale.json" "$logs/sweep-$n.json"
  # The world is loaded now; later steps reuse it (bench-scale.sh skips the
  # load when the running cluster holds the same world) and its build.
  export BENCH_SKIP_BUILD=1
done
