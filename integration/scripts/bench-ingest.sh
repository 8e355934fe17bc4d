#!/usr/bin/env bash
# The ingest ceiling (issue 47, item 1): one Pods cache fed as fast as it
# takes events by a synthetic HTTP/2 upstream inside the bench process, with
# 1,000 kubelet-shaped watchers (spec.nodeName) and INGEST_UNSELECTED_SET
# unselected ones (default "100 0": the issue's mix, then the kubelets alone),
# on one core and on two (see integration/bench/ingest/main.rs).
#
# Usage: bench-ingest.sh   (no cluster: the upstream is the bench's own)
#
# Configurations: watchmux under `taskset -c 0` with the bench on core 1
# (the one-core figures: the bench's load is not watchmux's), then under
# `taskset -c 0-1` with the bench on the same two cores (the machine has no
# third). Phases per configuration: INGEST_RATES (20000 50000 100000 0 events
# a second; 0 = as fast as the connection takes them), INGEST_SECONDS (3)
# each, at most INGEST_MAX_EVENTS (300,000; 30,000 with unselected
# watchers, whose 100 deliveries an event the bench itself must read).
#
# INGEST_PERF=1 (the default, if perf is installed): `perf record
# $INGEST_PERF_ARGS` (-F 999 -g) on watchmux during the last phase of the
# one-core run without unselected watchers, and its top symbols in
# .run/bench-ingest/perf-top.txt. watchmux's release build has no frame
# pointers: for callers, INGEST_PERF_ARGS="-F 499 --call-graph dwarf,16384"
# (about 40 MB of perf.data) and `perf report --children`.
#
# INGEST_TWO_CORES=0: the one-core runs only.
#
# INGEST_BASELINE_BIN=<a watchmux binary>: a before/after instead: only the
# one-core run without unselected watchers, alternated between that binary
# (A) and this tree's build (B) as ABAB... over INGEST_ROUNDS (2) rounds, no
# perf; JSON per run in ingest-0-u0-<A|B><round>.json.
#
# Prints the machine line and a Markdown table per configuration; JSON per
# configuration in .run/bench-ingest/ingest-<cores>-u<unselected>.json.
listen="127.0.0.1:${BENCH_PORT:-17692}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17693}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-ingest"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/ingest-*.json "$logs"/perf*
bench_build ingest "$logs"
read -r -a unselected_set <<< "${INGEST_UNSELECTED_SET:-100 0}"
export INGEST_RATES="${INGEST_RATES:-20000 50000 100000 0}"
perf_on=0
if [[ ${INGEST_PERF:-1} == 1 ]] && command -v perf >/dev/null; then perf_on=1; fi

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u '+%F %H:%M UTC');" \
  "commit $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "phases: ${INGEST_RATES// /, } events/s (0: open throttle), ${INGEST_SECONDS:-3} s each"
echo

if [[ -n ${INGEST_BASELINE_BIN:-} ]]; then
  for round in $(seq "${INGEST_ROUNDS:-2}"); do
    echo "### round $round: A = $INGEST_BASELINE_BIN"
    INGEST_BIN="$INGEST_BASELINE_BIN" INGEST_TAG="-A$round" run_ingest 0 1 0
    echo "### round $round: B = this tree's build"
    INGEST_TAG="-B$round" run_ingest 0 1 0
  done
  exit 0
fi

for u in "${unselected_set[@]}"; do
  perf=()
  if [[ $perf_on == 1 && $u == 0 ]]; then
    perf=(INGEST_PERF="$logs/perf.data" INGEST_PERF_ARGS="${INGEST_PERF_ARGS:--F 999 -g}")
  fi
  run_ingest 0 1 "$u" "${perf[@]}"
done
for u in "${unselected_set[@]}"; do
  [[ ${INGEST_TWO_CORES:-1} == 1 ]] || break
  run_ingest 0-1 0-1 "$u"
done

if [[ -s $logs/perf.data ]]; then
  # Self time by symbol, without the call chains -g recorded (perf prints
  # them under each symbol otherwise) and the empty IPC columns.
  perf report -i "$logs/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | sed -E 's/ +- +- *$//; s/ +$//' | head -40 > "$logs/perf-top.txt" || true
  echo "### Where watchmux's one core goes at the ceiling (perf, open throttle, no unselected watchers)"
  echo
  echo '```'
  head -25 "$logs/perf-top.txt"
  echo '```'
fi
