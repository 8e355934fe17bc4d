#!/usr/bin/env bash
# Fault cases through watchmux against the real kube-apiserver (issue 16,
# item 6; integration/bench/chaos, docs/chaos.md): per case a fresh
# watchmux behind a relay the harness can break, N reflector-shaped
# watchers, one fault; converged / lost / stuck / time to current.
#
# Usage: chaos.sh [case...]   (default: CHAOS_CASES, else every case;
#                              "quick": restart, half-open-existing,
#                              compaction, crd, watchmux-rollout,
#                              persist-truncated, persist-readonly; the
#                              persist cases mount tmpfs: root)
#
# Ports: the cluster's come from cluster-up.sh's variables (ETCD_PORT,
# ETCD_PEER_PORT, APISERVER_PORT; pass the same ones to every script, since
# the harness restarts kube-apiserver through cluster-up.sh); the harness's
# watchmux listens on 127.0.0.1:$CHAOS_PORT (17796), admin $CHAOS_ADMIN_PORT
# (17797). Knobs: the CHAOS_* variables in integration/bench/chaos/main.rs.
# Results: .run/chaos/chaos.{md,json}, watchmux's log per case.
listen="127.0.0.1:${CHAOS_PORT:-17796}"
admin="127.0.0.1:${CHAOS_ADMIN_PORT:-17797}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then CHAOS_CASES="$(IFS=,; echo "$*")"; fi
export CHAOS_CASES="${CHAOS_CASES:-all}"
logs="$root/.run/chaos"
rm -f "$logs"/chaos.{md,json} "$logs"/watchmux-*.log "$logs"/kubeconfig-*
# The fault hook (src/cache/fault.rs) for the consistency check's cases:
# this build has it (release, or the debug build with BENCH_PROFILE=dev as
# make test runs the quick set), the image's and `make release`'s never do.
BENCH_FEATURES=fault-injection bench_build chaos "$logs"
bench_cluster_up
state="$root/.run/cluster"
# A process the harness stopped (SIGSTOP) must not stay stopped if the run
# is interrupted; then bench-lib's own cleanup.
resume_cluster() {
  local p
  for p in apiserver etcd; do
    [[ -f "$state/$p.pid" ]] && kill -CONT "$(cat "$state/$p.pid")" 2>/dev/null || true
  done
  bench_cleanup
}
trap resume_cluster EXIT
machine_line | tee "$logs/machine.txt"
etcd_endpoint="$(sed -n 's/^ETCD_ENDPOINT=//p' "$state/env")"
bench_env
export CHAOS_WATCHMUX_BIN="$logs/watchmux" CHAOS_ETCD="$etcd_endpoint" \
  CHAOS_ETCD_PIDFILE="$state/etcd.pid" CHAOS_OUT_DIR="$logs" \
  CHAOS_RESTART_CMD="bash $scripts/cluster-up.sh --restart-apiserver"
status=0
timeout --signal=INT --kill-after=30 "${CHAOS_TIMEOUT:-3600}" "$logs/chaos-bench" --bench || status=$?
echo
echo "chaos: cases $CHAOS_CASES done in ${SECONDS}s (exit $status); results in $logs/chaos.md"
exit "$status"
