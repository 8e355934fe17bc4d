#!/usr/bin/env bash
# A tier rollout, checked against etcd (issue 45, item 2): three watchmux
# replicas (the dev build, with its fault hook) behind one address
# (tcp-balancer.py, as a Service), each in turn stopped with SIGTERM,
# started again, ready (/readyz), then a pause before the next, as a
# Deployment's rolling update with maxSurge 0 does it. Under it, through
# the balancer: N reflector-shaped watchers (the restart bench,
# RESTART_KIND=rollout) and a client-go informer fleet (integration/cmd/
# informers, ROLLOUT_INFORMERS_K factories, each its own connection), a
# writer creating, updating and deleting ConfigMaps throughout, and etcd's
# own watch of the namespace (integration/cmd/etcdwatch) as the oracle the
# watchers' and informers' events are checked against at the end.
#
# A RESTART_KIND of the restart bench rather than a bench of its own: the
# upgrade bench already has the steps, the writer, the marker waits and the
# check against etcd; a rollout is that with other steps and the informers.
#
# Sides, each on a fresh cluster (etcd and kube-apiserver) with fresh
# watchers and fresh replicas:
#   backfill     watchmux as built
#   no-backfill  WATCHMUX_FAULT_INJECT=no-backfill: a watch older than the
#                new process's history gets the cache's own 410, as before
#                the backfill (the before figure)
#   apiserver    the same clients straight at kube-apiserver, which is
#                restarted (cluster-up.sh --restart-apiserver, SIGTERM)
#                instead: one restart, as each client of the tier sees one
#
# Usage: bench-rollout.sh [N]     (default 1000)
#   ROLLOUT_SIDES="backfill no-backfill apiserver" ROLLOUT_PAUSE_S=5
#   ROLLOUT_INFORMERS_K=20 UPGRADE_WRITES_PER_S=4
# Ports (clear of the lead's cluster 16443/23379, CI's 17443/24379 and the
# other benches'): etcd 26379/26380, kube-apiserver 18601, the balancer
# 18610, the replicas 18620-18625 (listen/admin pairs).
#
# bench-rollout.sh --step: one step, as the bench runs it (RESTART_STEP=k:
# the k-th replica, or kube-apiserver on the apiserver side; 0: nothing).
set -euo pipefail
export ETCD_PORT="${ETCD_PORT:-26379}" ETCD_PEER_PORT="${ETCD_PEER_PORT:-26380}"
export APISERVER_PORT="${APISERVER_PORT:-18601}"
export ROLLOUT_LB_PORT="${ROLLOUT_LB_PORT:-18610}"
export ROLLOUT_REPLICA_PORTS="${ROLLOUT_REPLICA_PORTS:-18620 18622 18624}"   # each's admin: the next port
bench_ns=watchmux-bench-restart   # the restart bench's namespace
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
logs="$root/.run/bench-rollout"
read -r -a replica_ports <<< "$ROLLOUT_REPLICA_PORTS"

# start_replica K: the K-th replica (0-based) on its ports, in the
# background with its own log (appended: a restart keeps the previous
# process's lines), its pid in $logs/replica-K.pid; waits for /readyz, 60 s.
# ROLLOUT_SIDE=no-backfill turns the backfill off.
start_replica() {
  local k="$1" port="${replica_ports[$1]}" fault=()
  local admin="127.0.0.1:$(( port + 1 ))"
  [[ ${ROLLOUT_SIDE:-} == no-backfill ]] && fault=(WATCHMUX_FAULT_INJECT=no-backfill)
  echo "--- start $(date -u +%T.%N)" >> "$logs/replica-$k.log"
  env "${fault[@]}" RUST_LOG=warn "$logs/watchmux" --kubeconfig "$root/.run/kubeconfig" \
    --listen "127.0.0.1:$port" --admin-listen "$admin" --cache-resources configmaps --cache-warm \
    < /dev/null >> "$logs/replica-$k.log" 2>&1 &
  echo $! > "$logs/replica-$k.pid"
  for _ in $(seq 1 600); do
    curl -fs --max-time 2 "http://$admin/readyz" > /dev/null 2>&1 && return 0
    kill -0 "$(cat "$logs/replica-$k.pid")" 2>/dev/null || { echo "bench-rollout: replica $k exited" >&2; tail -5 "$logs/replica-$k.log" >&2; return 1; }
    sleep 0.1
  done
  echo "bench-rollout: replica $k not ready in 60 s" >&2
  return 1
}

# stop_replica K: its /metrics kept (the process's counters go with it:
# the side's watchmux figures are summed over these), SIGTERM, its exit
# awaited (40 s: watchmux's shutdown grace is 30 s), then SIGKILL if it is
# still there.
stop_replica() {
  local pidfile="$logs/replica-$1.pid" pid
  [[ -f $pidfile ]] || return 0
  pid="$(cat "$pidfile")"
  if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$logs/watchmux" ]]; then
    curl -s --max-time 5 "http://127.0.0.1:$(( replica_ports[$1] + 1 ))/metrics" \
      > "$logs/metrics-${ROLLOUT_SIDE:-none}-$1-$(date +%s%N).prom" || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 400); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# --step: what the bench runs before each of its marker writes.
rollout_step() {
  local step="${RESTART_STEP:?RESTART_STEP}" t0=$SECONDS
  (( step > 0 )) || return 0
  if [[ ${ROLLOUT_SIDE:?ROLLOUT_SIDE} == apiserver ]]; then
    bash "$here/cluster-up.sh" --restart-apiserver >&2
  else
    stop_replica "$(( step - 1 ))"
    start_replica "$(( step - 1 ))"
  fi
  echo "bench-rollout: step $step ($ROLLOUT_SIDE) ready again after $(( SECONDS - t0 ))s; pause ${ROLLOUT_PAUSE_S:-5}s" >&2
  sleep "${ROLLOUT_PAUSE_S:-5}"
}
if [[ ${1:-} == --step ]]; then rollout_step; exit 0; fi

# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$here/bench-lib.sh"
n="${1:-1000}"
read -r -a sides <<< "${ROLLOUT_SIDES:-backfill no-backfill apiserver}"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/restart-*.json "$logs"/etcd-*.jsonl "$logs"/informers-*.json "$logs"/replica-*.log "$logs"/metrics-*.prom "$logs"/watchmux-counters-*.txt
# The dev build: the one with the fault hook that turns the backfill off.
BENCH_PROFILE=dev BENCH_FEATURES=fault-injection bench_build restart "$logs"
bash "$scripts/build-k8s.sh" >/dev/null   # kube-apiserver, etcd, etcdwatch, informers

lb_pid=""
rollout_cleanup() {
  stop_oracle
  [[ -z $lb_pid ]] || kill "$lb_pid" 2>/dev/null || true
  local k
  for k in "${!replica_ports[@]}"; do stop_replica "$k"; done
  bash "$scripts/cluster-down.sh" >/dev/null 2>&1 || true
}
trap rollout_cleanup EXIT

backends=()
for p in "${replica_ports[@]}"; do backends+=("127.0.0.1:$p"); done
python3 "$scripts/tcp-balancer.py" "$ROLLOUT_LB_PORT" "${backends[@]}" > "$logs/tcp-balancer.log" 2>&1 &
lb_pid=$!
bash "$scripts/cluster-down.sh" >/dev/null 2>&1 || true
bash "$scripts/cluster-up.sh" >/dev/null
started_cluster=1   # for machine_line: this script's own cluster
machine_line
echo "rollout: $n watchers and ${ROLLOUT_INFORMERS_K:-20} informers; replicas ${replica_ports[*]} behind 127.0.0.1:$ROLLOUT_LB_PORT"

clk_tck="$(getconf CLK_TCK)"
for side in "${sides[@]}"; do
  for k in "${!replica_ports[@]}"; do stop_replica "$k"; done
  bash "$scripts/cluster-down.sh" >/dev/null
  bash "$scripts/cluster-up.sh" >/dev/null
  oracle="$logs/etcd-$side.jsonl"
  start_oracle "$bench_ns" "$oracle" "$logs/etcdwatch-$side.log"
  export ROLLOUT_SIDE="$side"
  steps="${#replica_ports[@]}" bench_side=watchmux proxy="127.0.0.1:$ROLLOUT_LB_PORT"
  if [[ $side == apiserver ]]; then
    # No replicas: the bench must not probe the balancer (nothing behind it).
    steps=1 bench_side=direct proxy=""
  else
    for k in "${!replica_ports[@]}"; do start_replica "$k"; done
  fi
  echo "bench-rollout: $n watchers, $side"
  env WATCHMUX_BENCH_KUBECONFIG="$root/.run/kubeconfig" WATCHMUX_BENCH_PROXY="$proxy" \
    WATCHMUX_BENCH_ADMIN="127.0.0.1:$(( replica_ports[0] + 1 ))" \
    WATCHMUX_BENCH_APISERVER_PIDFILE="$root/.run/cluster/apiserver.pid" CLK_TCK="$clk_tck" \
    RESTART_KIND=rollout RESTART_N="$n" RESTART_SIDES="$bench_side" RESTART_CMD="bash $scripts/bench-rollout.sh --step" \
    UPGRADE_ORACLE="$oracle" UPGRADE_STEPS="$steps" ROLLOUT_INFORMERS="$root/.run/bin/informers" \
    ROLLOUT_INFORMERS_OUT="$logs/informers-$side.json" BENCH_OUT="$logs/restart-rollout-$n-$side.json" \
    timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-900}" "$logs/restart-bench" --bench ||
    echo "bench-rollout: the $side run failed (exit $?)"
  for k in "${!replica_ports[@]}"; do stop_replica "$k"; done
  # Every replica process's counters, summed (each was read just before its SIGTERM).
  if [[ $side != apiserver ]]; then
    echo "bench-rollout: $side: watchmux counters summed over its $(find "$logs" -name "metrics-$side-*.prom" | wc -l) processes:"
    cat "$logs"/metrics-"$side"-*.prom | awk '
      /^watchmux_(watch_backfills_total|watch_backfill_watchers_total|cache_passthrough_total|upstream_relists_total|upstream_watch_restarts_total|watch_cache_consistent_read_total)[{ ]/ {
        name = $1; sub(/\{.*/, "", name); sum[name] += $NF }
      END { for (n in sum) printf "    %s %d\n", n, sum[n] }' | sort | tee "$logs/watchmux-counters-$side.txt"
  fi
  for k in "${!replica_ports[@]}"; do
    [[ -f $logs/replica-$k.log ]] || continue
    watchmux_warnings "$logs/replica-$k.log"
    mv -f "$logs/replica-$k.log" "$logs/replica-$k-$side.log"
  done
  stop_oracle
done
echo
echo "bench-rollout: done in ${SECONDS}s"
