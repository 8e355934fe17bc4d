#!/usr/bin/env bash
# Every core (issue 47, item 3): the same two loads with watchmux on one core
# and on two, the ratio (goal: two cores at least 1.8 times one), and what
# serializes where it falls short.
#
# Usage: bench-cores.sh   (CORES_PARTS="deliveries storm", the default; the
#                          storm part needs the test cluster: started and
#                          loaded if need be, stopped at the end if it was
#                          not running)
#
# Sides: watchmux under `taskset -c 0` with every client (and, for the storm,
# kube-apiserver and etcd) on core 1, then watchmux under `taskset -c 0-1`
# with the clients on the same two cores (the machine has no third). watchmux
# starts under taskset, so its runtime sizes its worker threads to the cores
# it has, as it would in a container of that size. Per side:
#
# - deliveries: the ingest bench (integration/bench/ingest, no cluster) at its
#   open throttle, 1,000 kubelet watchers and CORES_UNSELECTED (100) watchers
#   of every pod spread CORES_STREAMS_PER_CONNECTION (10) to an h2c connection,
#   CORES_EVENTS (60,000) events: deliveries a second, watchmux's CPU and each
#   of its threads' share of a core over the phase (the bench's watchers only
#   find each line's resourceVersion, no JSON parse). On the two-core side,
#   with CORES_PERF=1 (the default when perf is installed), `perf record
#   $CORES_PERF_ARGS` (-F 499 --call-graph dwarf,16384) of that phase: its
#   top symbols by inclusive share in .run/bench-cores/perf-deliveries-top.txt.
# - storm: bench-scale's watch-list storm of CORES_KUBELETS (5,000) kubelets
#   through one tier, on a world of CORES_NODES (5,000) nodes with
#   CORES_PODS_PER_NODE (2) pods, 100 services in 20 namespaces (loaded by the
#   first side unless the cluster holds it: about 5 minutes): time until the
#   last kubelet synced and the tier's CPU, with integration/scripts/
#   thread-cpu.py sampling the tier's threads (its busiest 2 s and its life)
#   and the kubelets' process (is their core the limit?).
#
# Load average at the start and end of each side is recorded: the machine is
# shared, and a side that waited for a CPU says so. Results in
# .run/bench-cores/: ingest-<cores>-u<n>.json, storm-<cores>.json,
# threads-<part>-<cores>.json, side-<part>-<cores>.json, and cores.json (every
# side and the ratios; docs/data/benchmarks/cores.json keeps the runs), with
# the Markdown summary on stdout (integration/scripts/bench-cores-report.py).
listen="127.0.0.1:${BENCH_PORT:-17694}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17695}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-cores"
mkdir -p "$logs"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/*.json "$logs"/perf*
read -r -a parts <<< "${CORES_PARTS:-deliveries storm}"
# "<watchmux's cores> <the clients' cores>" a side, one core first.
sides=("0 1" "0-1 0-1")
perf_on=0
if [[ ${CORES_PERF:-1} == 1 ]] && command -v perf >/dev/null; then perf_on=1; fi

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u '+%F %H:%M UTC');" \
  "commit $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo

# The thread samplers run on the clients' cores, beside each side.
sampler_pids=()
start_sampler() {  # start_sampler <cores> <exe> <out>
  taskset -c "$1" python3 "$scripts/thread-cpu.py" --exe "$2" --out "$3" &
  sampler_pids+=($!)
}
stop_samplers() {
  local pid
  for pid in "${sampler_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  sampler_pids=()
}
trap 'stop_samplers; bench_cleanup' EXIT

# side_record <part> <tag> <watchmux cores> <client cores> <load at start> <start time>
side_record() {
  jq -n --arg part "$1" --arg tag "$2" --arg watchmux_cpus "$3" --arg client_cpus "$4" \
    --argjson load_start "$5" --argjson load_end "$(cut -d' ' -f1 /proc/loadavg)" \
    --arg started "$6" --arg ended "$(date -u '+%F %T')" \
    '{$part, $tag, $watchmux_cpus, $client_cpus, $load_start, $load_end, $started, $ended}' \
    > "$logs/side-$1-$2.json"
}

deliveries() {
  bench_build ingest "$logs"
  local wm cl tag load0 t0 perf
  for side in "${sides[@]}"; do
    read -r wm cl <<< "$side"
    tag="${wm//-/to}"
    perf=()
    if [[ $perf_on == 1 && $wm == *-* ]]; then
      perf=(INGEST_PERF="$logs/perf-deliveries.data"
        INGEST_PERF_ARGS="${CORES_PERF_ARGS:--F 499 --call-graph dwarf,16384}")
    fi
    load0="$(cut -d' ' -f1 /proc/loadavg)" t0="$(date -u '+%F %T')"
    echo "### Deliveries, watchmux on cores $wm, the bench on $cl (load average $load0)"
    echo
    INGEST_RATES=0 INGEST_MAX_EVENTS="${CORES_EVENTS:-60000}" \
      INGEST_STREAMS_PER_CONNECTION="${CORES_STREAMS_PER_CONNECTION:-10}" \
      run_ingest "$wm" "$cl" "${CORES_UNSELECTED:-100}" "${perf[@]}"
    side_record deliveries "$tag" "$wm" "$cl" "$load0" "$t0"
  done
  if [[ -s $logs/perf-deliveries.data ]]; then
    # Inclusive shares (--children) by symbol: the reflector task's frames
    # and everything it calls, against the streams' and the connections'.
    perf report -i "$logs/perf-deliveries.data" --children --sort symbol --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | sed -E 's/ +$//' | head -80 > "$logs/perf-deliveries-top.txt" || true
    # The same samples by thread: how the work spread over the workers.
    perf report -i "$logs/perf-deliveries.data" --no-children --sort pid --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | sed -E 's/ +$//' > "$logs/perf-deliveries-threads.txt" || true
  fi
}

storm() {
  # The world and the storm (bench-scale.sh's knobs), the tier on our ports.
  export SCALE_NODES="${CORES_NODES:-5000}" SCALE_PODS_PER_NODE="${CORES_PODS_PER_NODE:-2}" \
    SCALE_SERVICES=100 SCALE_NAMESPACES=20 SCALE_KUBELETS="${CORES_KUBELETS:-5000}" \
    SCALE_SIDES=watchmux SCALE_STORM_MODES=watch-list SCALE_CHURN_SECONDS=0 SCALE_RESTART_CMD= \
    SCALE_KEEP=1 SCALE_PHASES=load,storm BENCH_PORT="${listen##*:}" BENCH_ADMIN_PORT="${admin##*:}" \
    SCALE_WATCHMUX_ARGS="${SCALE_WATCHMUX_ARGS:---max-connections-per-address 10000}"
  # Every kubelet connects from 127.0.0.1: the tier's default share of one
  # address is a quarter of its connection budget, which an open-file limit
  # of 20,000 (this machine's) lowers to 13,883, so 3,470 connections, and
  # the rest of the storm would be turned away.
  # bench-scale.sh keeps the cluster (SCALE_KEEP): stop it at the end only
  # if it was not running before.
  bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1 || started_cluster=1
  local wm cl tag load0 t0
  for side in "${sides[@]}"; do
    read -r wm cl <<< "$side"
    tag="${wm//-/to}"
    rm -f "$root/.run/bench-scale/scale.json"
    load0="$(cut -d' ' -f1 /proc/loadavg)" t0="$(date -u '+%F %T')"
    echo "### Storm, the tier on cores $wm, the kubelets, kube-apiserver and etcd on $cl (load average $load0)"
    echo
    start_sampler "$cl" "$root/.run/bench-scale/watchmux" "$logs/threads-storm-$tag.json"
    # And the kubelets' process: on the one-core side, is their core spent?
    start_sampler "$cl" "$root/.run/bench-scale/scale-bench" "$logs/threads-storm-clients-$tag.json"
    SCALE_TIER_CPUS="$wm" SCALE_CLIENT_CPUS="$cl" bash "$scripts/bench-scale.sh" ||
      echo "bench-cores: the storm on cores $wm failed (exit $?)"
    stop_samplers
    side_record storm "$tag" "$wm" "$cl" "$load0" "$t0"
    [[ -f $root/.run/bench-scale/scale.json ]] && cp "$root/.run/bench-scale/scale.json" "$logs/storm-$tag.json"
    # The world is loaded and the binaries built by the first side.
    export BENCH_SKIP_BUILD=1
  done
}

for part in "${parts[@]}"; do
  case "$part" in
    deliveries) deliveries ;;
    storm) storm ;;
    *) echo "bench-cores: CORES_PARTS holds deliveries and storm, not $part" >&2; exit 2 ;;
  esac
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo
python3 "$scripts/bench-cores-report.py" "$logs"
