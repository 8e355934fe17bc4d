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
#   open throttle, 1,000 kubelet watchers and, per CORES_UNSELECTED_SET
#   ("100 0"), that many watchers of every pod, spread
#   CORES_STREAMS_PER_CONNECTION (10) to an h2c connection: 100 makes each
#   event 101 deliveries (CORES_EVENTS, 60,000 events), 0 one delivery, the
#   ingest ceiling, where the cache's one reflector task is most of the work
#   (CORES_EVENTS_KUBELETS, 300,000 events). Deliveries a second, watchmux's
#   CPU and each of its threads' share of a core and time waiting for one
#   over the phase. The bench's watchers only find each line's
#   resourceVersion, no JSON parse.
# - storm: bench-scale's watch-list storm of CORES_KUBELETS (5,000) kubelets
#   through one tier, on a world of CORES_NODES (5,000) nodes with
#   CORES_PODS_PER_NODE (2) pods, 100 services in 20 namespaces (loaded by the
#   first side unless the cluster holds it: about 3 minutes): time until the
#   last kubelet synced and the tier's CPU, with integration/scripts/
#   thread-cpu.py sampling the tier's threads from its readiness (its busiest
#   4 s) and the kubelets' process (is their core the limit?).
#
# Then, with CORES_PERF=1 (the default when perf is installed), each load
# once more on two cores under `perf record $CORES_PERF_ARGS` (-F 499
# --call-graph dwarf,16384; the release build has no frame pointers), apart
# from the measured runs so that perf's own CPU is not in them: the top
# symbols by inclusive share and the samples by thread in
# .run/bench-cores/perf-<load>-{top,threads}.txt.
#
# Load average at the start and end of each side is recorded: the machine is
# shared, and a side that waited for a CPU says so (its threads' run-queue
# wait). Results in .run/bench-cores/: ingest-<cores>-u<n>.json, storm-<cores>.json,
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
read -r -a unselected_set <<< "${CORES_UNSELECTED_SET:-100 0}"
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
start_sampler() {  # start_sampler <cores> <exe> <out> [thread-cpu.py options...]
  local cores="$1" exe="$2" out="$3"; shift 3
  taskset -c "$cores" python3 "$scripts/thread-cpu.py" --exe "$exe" --out "$out" "$@" &
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

# profile_report <perf.data> <name>: its top symbols by inclusive share
# (--children: a task's frames with everything they call, so the reflector's
# share against the streams' and the connections') in perf-<name>-top.txt,
# and its samples by thread (how the work spread over the workers) in
# perf-<name>-threads.txt.
profile_report() {
  [[ -s $1 ]] || return 0
  perf report -i "$1" --children --sort symbol --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | sed -E 's/ +$//' | head -400 > "$logs/perf-$2-top.txt" || true
  perf report -i "$1" --no-children --sort pid --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | sed -E 's/ +$//' > "$logs/perf-$2-threads.txt" || true
}
perf_args="${CORES_PERF_ARGS:--F 499 --call-graph dwarf,16384}"

# each_side <part> <what> <run>: `<run> <watchmux cores> <client cores> <tag>`
# once a side, one core first, each side's load average and times in
# side-<part>-<tag>.json.
each_side() {
  local part="$1" what="$2" run="$3" wm cl tag load0 t0
  for side in "${sides[@]}"; do
    read -r wm cl <<< "$side"
    tag="${wm//-/to}"
    load0="$(cut -d' ' -f1 /proc/loadavg)" t0="$(date -u '+%F %T')"
    echo "### $what, watchmux on cores $wm, its clients on $cl (load average $load0)"
    echo
    "$run" "$wm" "$cl" "$tag"
    side_record "$part" "$tag" "$wm" "$cl" "$load0" "$t0"
  done
}

# deliveries_side <watchmux cores> <client cores> <tag>: the ingest bench's
# open throttle with deliveries()'s $u unselected watchers and $events events.
deliveries_side() {
  INGEST_RATES=0 INGEST_MAX_EVENTS="$events" INGEST_STREAMS_PER_CONNECTION="${CORES_STREAMS_PER_CONNECTION:-10}" \
    run_ingest "$1" "$2" "$u" "${@:4}"
}

deliveries() {
  bench_build ingest "$logs"
  local u events
  for u in "${unselected_set[@]}"; do
    # Each event is u + 1 deliveries; kubelets alone need more events for
    # a phase of a few seconds.
    events="${CORES_EVENTS:-60000}"
    [[ $u != 0 ]] || events="${CORES_EVENTS_KUBELETS:-300000}"
    each_side "deliveries-u$u" "Deliveries, $u unselected watchers" deliveries_side
    # The profile is a run of its own on two cores: perf's unwinding costs
    # CPU on the cores it measures, which the measured runs should not pay.
    if [[ $perf_on == 1 ]]; then
      echo "### Deliveries, $u unselected watchers, cores 0-1 again under perf (its figures are not the table's)"
      echo
      deliveries_side 0-1 0-1 profiled INGEST_PERF="$logs/perf-deliveries-u$u.data" INGEST_PERF_ARGS="$perf_args" \
        BENCH_OUT="$logs/profiled-ingest-0to1-u$u.json" INGEST_WATCHMUX_LOG="$logs/watchmux-profiled-u$u.log"
      profile_report "$logs/perf-deliveries-u$u.data" "deliveries-u$u"
    fi
  done
}

# perf_when_ready <perf.data> <seconds>: perf record of the tier
# bench-scale.sh starts for the storm (the one caching pods, not its
# baseline tier) from when it is ready, for <seconds>.
perf_when_ready() {
  local pid=""
  for _ in $(seq 1 3000); do
    pid="$(pgrep -n -f "^$root/.run/bench-scale/watchmux .*--cache-resources pods" || true)"
    if [[ -n $pid ]] && curl -fs "http://$admin/readyz" >/dev/null 2>&1; then break; fi
    pid=""
    sleep 0.1
  done
  [[ -n $pid ]] || return 0
  # shellcheck disable=SC2086 # the arguments are words
  perf record $perf_args -p "$pid" -o "$1" -- sleep "$2" >/dev/null 2>&1 || true
}

# storm_side <watchmux cores> <client cores> <tag>: one storm, its samplers
# beside it; results in storm-<tag>.json.
storm_side() {
  local wm="$1" cl="$2" tag="$3"
  rm -f "$root/.run/bench-scale/scale.json"
  # Its busiest 4 s: a run queue's wait is counted when the thread gets its
  # CPU, so over a shorter window a wait begun before it can count in it.
  start_sampler "$cl" "$root/.run/bench-scale/watchmux" "$logs/threads-storm-$tag.json" \
    --ready-url "http://$admin/readyz" --window 4
  # And the kubelets' process: on the one-core side, is their core spent?
  start_sampler "$cl" "$root/.run/bench-scale/scale-bench" "$logs/threads-storm-clients-$tag.json"
  SCALE_TIER_CPUS="$wm" SCALE_CLIENT_CPUS="$cl" bash "$scripts/bench-scale.sh" ||
    echo "bench-cores: the storm on cores $wm failed (exit $?)"
  stop_samplers
  [[ -f $root/.run/bench-scale/scale.json ]] && cp "$root/.run/bench-scale/scale.json" "$logs/storm-$tag.json"
  # The world is loaded and the binaries built by the first side.
  export BENCH_SKIP_BUILD=1
}

storm() {
  # The world and the storm (bench-scale.sh's knobs), the tier on our ports.
  export SCALE_NODES="${CORES_NODES:-5000}" SCALE_PODS_PER_NODE="${CORES_PODS_PER_NODE:-2}" \
    SCALE_SERVICES=100 SCALE_NAMESPACES=20 SCALE_KUBELETS="${CORES_KUBELETS:-5000}" \
    SCALE_SIDES=watchmux SCALE_STORM_MODES=watch-list SCALE_CHURN_SECONDS=0 SCALE_RESTART_CMD='' \
    SCALE_KEEP=1 SCALE_PHASES=load,storm BENCH_PORT="${listen##*:}" BENCH_ADMIN_PORT="${admin##*:}" \
    SCALE_WATCHMUX_ARGS="${SCALE_WATCHMUX_ARGS:---max-connections-per-address 10000}"
  # Every kubelet connects from 127.0.0.1: the tier's default share of one
  # address is a quarter of its connection budget, which an open-file limit
  # of 20,000 (this machine's) lowers to 13,883, so 3,470 connections, and
  # the rest of the storm would be turned away.
  # bench-scale.sh keeps the cluster (SCALE_KEEP): stop it at the end only
  # if it was not running before.
  bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1 || started_cluster=1
  local perf_pid
  each_side storm "Storm (kube-apiserver and etcd with the clients)" storm_side
  if [[ $perf_on == 1 ]]; then
    echo "### Storm, the tier on cores 0-1 again under perf (its figures are not the table's)"
    echo
    perf_when_ready "$logs/perf-storm.data" "${CORES_STORM_PERF_SECONDS:-10}" &
    perf_pid=$!
    storm_side 0-1 0-1 profiled-0to1
    wait "$perf_pid" || true
    profile_report "$logs/perf-storm.data" storm
  fi
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
