#!/usr/bin/env bash
# One API server of three gone, under N watchers (issue 44, item 5): the
# restart bench (integration/bench/restart/main.rs, RESTART_KIND=failover)
# with two more kube-apiservers on the cluster's etcd (cluster-up.sh
# --extra-apiserver), side by side in one run:
#   direct    the watchers through a plain TCP load balancer over the three
#             (tcp-balancer.py, as kubespray's nginx-proxy or haproxy in TCP
#             mode): a third of their connections go to the server that goes
#   watchmux  the watchers through watchmux with --upstream-servers listing
#             the three, the one that goes first (it carries every cache's
#             watch)
# For each way of going: SIGKILL, and a freeze (SIGSTOP: connections open,
# nothing answered, the half-open case). Then a write through a surviving
# server, and the time until every watcher has it; the watchers' LISTs,
# broken streams and 410s; watchmux's upstream watch restarts and relists.
# The frozen server is thawed and stopped after its run.
#
# Usage: bench-failover.sh [N...]       (default: 5000; or FAILOVER_NS="...")
#   FAILOVER_WAYS="kill freeze"   FAILOVER_PORTS="16471 16472" (the two extra API servers)
#   FAILOVER_LB_PORT=16470
listen="127.0.0.1:${BENCH_PORT:-17598}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17599}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then ns=("$@"); else read -r -a ns <<< "${FAILOVER_NS:-5000}"; fi
read -r -a ways <<< "${FAILOVER_WAYS:-kill freeze}"
read -r gone_port other_port <<< "${FAILOVER_PORTS:-16471 16472}"
lb_port="${FAILOVER_LB_PORT:-16470}"
logs="$root/.run/bench-failover"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/restart-*.json
bench_build restart "$logs"
bench_cluster_up
machine_line
state="$root/.run/cluster"
main_port="$(sed -n 's|^APISERVER_URL=https://127.0.0.1:||p' "$state/env")"
[[ -n $main_port ]] || { echo "bench-failover: no APISERVER_URL in $state/env" >&2; exit 1; }

lb_pid=""
stop_extra() {  # stop_extra PORT: thawed first if frozen
  local pidfile="$state/apiserver-$1.pid"
  [[ -f $pidfile ]] || return 0
  kill -CONT "$(cat "$pidfile")" 2>/dev/null || true
  kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
  rm -f "$pidfile"
}
failover_cleanup() {
  [[ -z $lb_pid ]] || kill "$lb_pid" 2>/dev/null || true
  stop_extra "$gone_port"; stop_extra "$other_port"
  bench_cleanup
}
trap failover_cleanup EXIT

python3 "$scripts/tcp-balancer.py" "$lb_port" "127.0.0.1:$main_port" "127.0.0.1:$gone_port" "127.0.0.1:$other_port" \
  > "$logs/tcp-balancer.log" 2>&1 &
lb_pid=$!

servers="https://127.0.0.1:$gone_port,https://127.0.0.1:$other_port,https://127.0.0.1:$main_port"
for way in "${ways[@]}"; do
  case "$way" in
    kill) signal=KILL ;;
    freeze) signal=STOP ;;
    *) echo "bench-failover: FAILOVER_WAYS takes kill and freeze, not $way" >&2; exit 2 ;;
  esac
  for n in "${ns[@]}"; do
    for side in direct watchmux; do
      # Every run starts with all three up.
      stop_extra "$gone_port"
      bash "$scripts/cluster-up.sh" --extra-apiserver "$gone_port" >/dev/null
      bash "$scripts/cluster-up.sh" --extra-apiserver "$other_port" >/dev/null
      echo "bench-failover: $way, $n watchers, $side"
      WATCHMUX_ARGS="--upstream-servers=$servers ${WATCHMUX_ARGS:-}" \
        run_config restart "$way-$n-$side" configmaps RESTART_KIND=failover RESTART_N="$n" RESTART_SIDES="$side" \
        RESTART_CMD="kill -$signal \$(cat $state/apiserver-$gone_port.pid)" \
        WATCHMUX_BENCH_DIRECT_ADDR="127.0.0.1:$lb_port"
    done
  done
done
echo
echo "bench-failover: done in ${SECONDS}s"
