#!/usr/bin/env bash
# Balance after a rollout (issue 45, item 3; docs/benchmarks.md "Balance
# after a rollout"): the chaos case tier-rebalance, two tiers of three
# replicas behind their own TCP balancers, CHAOS_N (1,000) kubelet-shaped
# watchers each and writes throughout, rolled out side by side, one with the
# chart tier's --goaway-chance and --max-connection-age and one with
# neither; then each replica's open connections every 15 s for
# CHAOS_REBALANCE_S (600) seconds.
#
# Ports: CHAOS_PORT (19400) and CHAOS_ADMIN_PORT (19401); the two tiers'
# replicas listen at CHAOS_PORT + 10 to 15 and + 20 to 25. The cluster is
# cluster-up.sh's, with its variables (APISERVER_PORT, ETCD_PORT,
# ETCD_PEER_PORT: pass the ones of the cluster you mean).
# Results: .run/bench-rebalance/rebalance-<UTC time>.json, copied to
# docs/data/benchmarks/rebalance.json; the plot: bench-plots.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
out="$root/.run/bench-rebalance"
mkdir -p "$out"
export CHAOS_PORT="${CHAOS_PORT:-19400}" CHAOS_ADMIN_PORT="${CHAOS_ADMIN_PORT:-19401}"
export CHAOS_N="${CHAOS_N:-1000}" CHAOS_REBALANCE_S="${CHAOS_REBALANCE_S:-600}"
# Two stages' set-up, the rollouts, the sampling and the finish.
export CHAOS_CASE_TIMEOUT_S="${CHAOS_CASE_TIMEOUT_S:-$((CHAOS_REBALANCE_S + 900))}"
export CHAOS_TIMEOUT="${CHAOS_TIMEOUT:-$((CHAOS_CASE_TIMEOUT_S + 300))}"
status=0
bash "$scripts/chaos.sh" tier-rebalance || status=$?
result="$out/rebalance-$(date -u +%Y%m%dT%H%M%SZ).json"
python3 - "$root/.run/chaos/chaos.json" "$root/.run/chaos/machine.txt" "$result" <<'PY'
import json, sys
chaos, machine, result = sys.argv[1:4]
with open(chaos) as f:
    run = json.load(f)
case = next(c for c in run["cases"] if c["case"] == "tier-rebalance")
with open(machine) as f:
    lines = f.read().strip()
out = {"machine": lines, "config": run["config"], "passed": case["passed"], "error": case["error"],
       "fault": case["fault"], "notes": case["notes"], "problems": case["problems"],
       "groups": case["groups"], "details": case["details"]}
with open(result, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(f"bench-rebalance: {result}")
PY
cp -f "$result" "$root/docs/data/benchmarks/rebalance.json"
exit "$status"
