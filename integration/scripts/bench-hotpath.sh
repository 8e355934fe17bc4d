#!/usr/bin/env bash
# What fairness costs on the hot path (issue 47, item 5), measured A/B in one
# run: the fan-out bench (integration/bench/fanout, watchmux side only,
# HTTP/2 over TLS, 100 changes/s of 1 KiB, HOTPATH_SECONDS each) against a
# fresh release watchmux with fairness as shipped (--fairness-seats 100: a
# cached watch takes a seat until its initial events are written, a timer
# task per seat, and its body stays wrapped for its whole life) and with it
# off (--fairness-seats 0: no seat, no wrapper, no task). The two alternate,
# ABBA, for HOTPATH_ROUNDS rounds, so a drift of the machine falls on both.
# Figure: watchmux's CPU per 1,000 deliveries (its CPU during the writes
# less its idle baseline), per run and the median of each.
#
# Then, unless HOTPATH_PERF=0, one more run with fairness on under
# `perf record` (watchmux only): the share of watchmux's CPU samples in the
# fairness wrapper's poll (fairness::SeatedBody), in the dispatch that does
# the slow-watcher bookkeeping per event and watcher (a watcher's queue
# against its soft limit, the behind flag: WatcherHandle::offer, inlined
# into fanout::Dispatching::dispatch), in the body's side of the queue
# (delivery::watcher) and in the timers a watch stream polls (tokio's Sleep,
# AtomicWaker), functions' self time.
#
# HOTPATH_BASELINE_BIN=<a watchmux binary>: instead of fairness on and off,
# this tree's build against that binary (an earlier commit's release build,
# e.g. a copy of .run/bench-hotpath/watchmux), both with fairness as
# shipped: "on" is this build, "off" the baseline. For a change's before and
# after, alternated the same way.
#
# Usage: bench-hotpath.sh [N...]     (default 1000; or HOTPATH_NS="...")
#   HOTPATH_ROUNDS=3 HOTPATH_SECONDS=10 HOTPATH_PERF=1 HOTPATH_BASELINE_BIN=
# Ports, clear of the test cluster's and CI's: its own cluster on etcd
# 26379/26380 and kube-apiserver 18601 (the rollout bench's), watchmux 18650
# (admin 18651). JSON per run in .run/bench-hotpath/, a summary in
# hotpath-summary.json.
export ETCD_PORT="${ETCD_PORT:-26379}" ETCD_PEER_PORT="${ETCD_PEER_PORT:-26380}"
export APISERVER_PORT="${APISERVER_PORT:-18601}"
listen="127.0.0.1:${BENCH_PORT:-18650}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-18651}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then ns=("$@"); else read -r -a ns <<< "${HOTPATH_NS:-1000}"; fi
rounds="${HOTPATH_ROUNDS:-3}"
logs="$root/.run/bench-hotpath"
rm -f "$logs"/fanout-*.json "$logs"/hotpath-summary.json
bench_build fanout "$logs"
bench_cluster_up
machine_line
# The figures' shape: as the fan-out bench's headline (TLS, HTTP/2).
base_args="--tls-cert-file $root/.run/cluster/apiserver.crt --tls-private-key-file $root/.run/cluster/apiserver.key"
export WATCHMUX_BENCH_PROXY_TLS=1 FANOUT_SIDES=watchmux FANOUT_SHAPE=h2 FANOUT_RATES=100 FANOUT_SIZES=1024
export FANOUT_SECONDS="${HOTPATH_SECONDS:-10}"
declare -A seats=([on]=100 [off]=0)
baseline="${HOTPATH_BASELINE_BIN:-}"
if [[ -n $baseline ]]; then
  seats[off]=100
  cp -f "$logs/watchmux" "$logs/watchmux-this"
  echo "bench-hotpath: this build ($("$logs/watchmux-this" --version)) against $baseline ($("$baseline" --version))"
fi

# one <N> <on|off> <round>: one fan-out run, its JSON to fanout-<N>-<mode>-<round>.json.
one() {
  if [[ -n $baseline ]]; then
    if [[ $2 == on ]]; then cp -f "$logs/watchmux-this" "$logs/watchmux"; else cp -f "$baseline" "$logs/watchmux"; fi
  fi
  WATCHMUX_ARGS="$base_args --fairness-seats ${seats[$2]}" \
    run_config fanout "$1-$2-$3" configmaps FANOUT_N="$1" > "$logs/run-$1-$2-$3.md"
  echo "bench-hotpath: N=$1 fairness $2, round $3: $(jq -r '.sides[0].cells[0].cpu_ms_per_1000_events // "failed"' \
    "$logs/fanout-$1-$2-$3.json" 2>/dev/null || echo failed) ms of CPU per 1,000 deliveries"
}

for n in "${ns[@]}"; do
  for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then one "$n" on "$r"; one "$n" off "$r"; else one "$n" off "$r"; one "$n" on "$r"; fi
  done
done

python3 - "$logs" "$rounds" "${ns[@]}" > "$logs/hotpath-summary.json" <<'EOF'
import json, os, statistics, sys
logs, rounds, ns = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
out = {"rounds": rounds, "by_n": {}}
for n in ns:
    row = {}
    for mode in ("on", "off"):
        vals = []
        for r in range(1, rounds + 1):
            try:
                cell = json.load(open(os.path.join(logs, f"fanout-{n}-{mode}-{r}.json")))["sides"][0]["cells"][0]
                vals.append(cell["cpu_ms_per_1000_events"])
            except (OSError, KeyError, IndexError, ValueError):
                vals.append(None)
        got = [v for v in vals if v is not None]
        row[mode] = {"runs": vals, "median": statistics.median(got) if got else None}
    on, off = row["on"]["median"], row["off"]["median"]
    row["on_minus_off"] = (on - off) if on is not None and off is not None else None
    out["by_n"][n] = row
print(json.dumps(out, indent=1))
EOF
echo
if [[ -n $baseline ]]; then
  echo "### This build against the baseline: watchmux CPU per 1,000 deliveries (ms), HTTP/2 over TLS, 100 changes/s of 1 KiB"
  echo
  echo "| N | this build: runs; median | baseline ($(basename "$baseline")): runs; median | this - baseline |"
else
  echo "### Fairness on the hot path: watchmux CPU per 1,000 deliveries (ms), HTTP/2 over TLS, 100 changes/s of 1 KiB"
  echo
  echo "| N | fairness on (as shipped): runs; median | off (--fairness-seats 0): runs; median | on - off |"
fi
echo "|---|---|---|---|"
jq -r '.by_n | to_entries[] | "| \(.key) | \(.value.on.runs | map(tostring) | join(" / ")); **\(.value.on.median)** | \(.value.off.runs | map(tostring) | join(" / ")); **\(.value.off.median)** | \(.value.on_minus_off) |"' \
  "$logs/hotpath-summary.json"

[[ -z $baseline ]] || cp -f "$logs/watchmux-this" "$logs/watchmux"
if [[ ${HOTPATH_PERF:-1} != 0 ]] && command -v perf >/dev/null; then
  n="${ns[0]}"
  # shellcheck disable=SC2086 # base_args: flags, split on purpose
  start_watchmux "$logs/watchmux" "$logs/watchmux-perf.log" --cache-resources configmaps --cache-warm \
    $base_args --fairness-seats 100
  bench_env
  # Self time only: the release build has no frame pointers.
  perf record -F 999 -p "$wm_pid" -o "$logs/perf.data" 2> "$logs/perf-record.log" &
  perf_pid=$!
  sleep 1
  FANOUT_N="$n" BENCH_OUT="$logs/perf-$n.json" \
    timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-600}" "$logs/fanout-bench" --bench > "$logs/perf-run.md" ||
    echo "bench-hotpath: the perf run failed"
  kill -INT "$perf_pid" 2>/dev/null || true
  wait "$perf_pid" 2>/dev/null || true
  stop_watchmux
  perf report -i "$logs/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9.]+%' > "$logs/perf-symbols.txt" || true
  echo
  echo "### Where watchmux's CPU went with fairness on (perf, N=$n, self time; the whole run: connect, idle, writes)"
  echo
  echo "| share | function |"
  echo "|---|---|"
  grep -E 'fairness|SeatedBody|take_back|delivery::watcher|fanout::Dispatching|slow_watcher|Sleep as|register_by_ref' "$logs/perf-symbols.txt" |
    head -20 | awk '{share=$1; $1=""; sub(/^ *\[\.\] */, ""); print "| " share " | `" $0 "` |"}'
  echo
  echo "Top 10 overall:"
  echo
  head -10 "$logs/perf-symbols.txt" | sed 's/^/    /'
fi
echo
echo "bench-hotpath: done in ${SECONDS}s"
