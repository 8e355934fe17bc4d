#!/usr/bin/env bash
# A million objects (issue 47, item 2): one Pods cache of MILLION_PODS
# (1,000,000) pods of about 1 KiB over MILLION_NODES (5,000) nodes, listed
# from the synthetic upstream inside the bench process (the ingest bench's,
# integration/bench/synthetic/), with watchmux under `taskset -c
# $MILLION_CPUS` (0) and the bench on MILLION_BENCH_CPUS (1). See
# integration/bench/million/main.rs for what it measures.
#
# Usage: bench-million.sh   (no cluster; about 3 minutes, 2.5 GiB of memory
# for watchmux and as much for the bench, and the persisted store, about
# 1 GiB, in .run/bench-million/persist while the run needs it)
#
# MILLION_REQUESTS (1000) a latency series, MILLION_SLOW_MIBPS (100) the slow
# reader's pace, MILLION_PERSIST=0 skips the two persisted starts.
#
# Prints the machine line (with the load average at the start and the end)
# and the Markdown tables; JSON in .run/bench-million/million.json.
listen="127.0.0.1:${BENCH_PORT:-17694}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17695}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-million"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -rf "$logs"/million.json "$logs"/persist
bench_build million "$logs"

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u '+%F %H:%M UTC');" \
  "commit $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo

status=0
env WATCHMUX_BIN="$logs/watchmux" WATCHMUX_BENCH_PROXY="$listen" WATCHMUX_BENCH_ADMIN="$admin" \
  MILLION_CPUS="${MILLION_CPUS:-0}" MILLION_LOGS="$logs" BENCH_OUT="$logs/million.json" \
  timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-900}" \
  taskset -c "${MILLION_BENCH_CPUS:-1}" "$logs/million-bench" --bench || {
  status=$?
  echo "bench-million: the run failed (exit $status)"
}
for log in "$logs"/watchmux-*.log; do
  [[ -e $log ]] && watchmux_warnings "$log"
done
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%H:%M UTC')"
exit "$status"
