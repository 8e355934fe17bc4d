#!/usr/bin/env bash
# Fan-out to many watchers, straight at kube-apiserver and through watchmux, in
# one run against the real API server (see integration/bench/fanout/main.rs).
#
# Usage: bench-fanout.sh [N...]        (default: 100 1000 10000; or FANOUT_NS="...")
#
# For each N: N watches multiplexed over HTTP/2 connections; and for each N in
# FANOUT_H1_NS (default 1000) also one HTTP/1.1 connection per watcher. In each
# configuration, one cell per change rate (FANOUT_RATES, default 10 100 1000 a
# second) and object size (FANOUT_SIZES, default 1024 20480 bytes), each
# writing for FANOUT_SECONDS (5; shortened, or left out, where a cell would
# deliver more than the bench's bounds: see the bench's header). Each
# configuration gets a fresh release watchmux (--cache-resources configmaps
# --cache-warm) so that its memory figures start from the same point.
#
# Then, unless FANOUT_STRACE=0, one more configuration through watchmux only
# (N=FANOUT_STRACE_N, 1000, HTTP/2, 100 changes/s of 1 KiB) with
# `strace -c -f -e trace=write,writev,sendmsg,sendto` on watchmux: system
# calls per delivered event, counted by the kernel's other witness.
#
# FANOUT_TLS=1 (the default): watchmux serves its API listener over TLS (the
# test cluster's serving certificate, 127.0.0.1, from the CA the bench trusts
# through the kubeconfig), HTTP/2 or HTTP/1.1 by ALPN, as kube-apiserver
# always does, so the two sides pay the same encryption; FANOUT_TLS=0 serves
# plain text (h2c), the node-local loopback shape.
#
# Prints the machine line and Markdown tables; JSON per configuration in
# .run/bench-fanout/. Bounded: each run is cut off after BENCH_RUN_TIMEOUT
# seconds (600), watchmux gets 10 s to stop after SIGTERM.
listen="127.0.0.1:${BENCH_PORT:-17592}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17593}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
if [[ $# -gt 0 ]]; then ns=("$@"); else read -r -a ns <<< "${FANOUT_NS:-100 1000 10000}"; fi
read -r -a h1_ns <<< "${FANOUT_H1_NS-1000}"
logs="$root/.run/bench-fanout"
[[ ${BENCH_KEEP:-0} == 1 ]] || rm -f "$logs"/fanout-*.json  # BENCH_KEEP=1: add to the last results
bench_build fanout "$logs"
if [[ ${FANOUT_TLS:-1} == 1 ]]; then
  export WATCHMUX_ARGS="${WATCHMUX_ARGS:-} --tls-cert-file $root/.run/cluster/apiserver.crt --tls-private-key-file $root/.run/cluster/apiserver.key"
  export WATCHMUX_BENCH_PROXY_TLS=1
  echo "watchmux API over TLS (FANOUT_TLS=1)"
fi
bench_cluster_up
machine_line
export FANOUT_RATES="${FANOUT_RATES:-10 100 1000}" FANOUT_SIZES="${FANOUT_SIZES:-1024 20480}"
echo "cells: rates ${FANOUT_RATES// /, } changes/s; sizes ${FANOUT_SIZES// /, } bytes; ${FANOUT_SECONDS:-5} s each"

for n in "${ns[@]}"; do
  run_config fanout "$n-h2" configmaps FANOUT_N="$n" FANOUT_SHAPE=h2
  for h in "${h1_ns[@]}"; do
    [[ $n == "$h" ]] && run_config fanout "$n-h1" configmaps FANOUT_N="$n" FANOUT_SHAPE=h1
  done
done

if [[ ${FANOUT_STRACE:-1} != 0 ]] && command -v strace >/dev/null; then
  n="${FANOUT_STRACE_N:-1000}"
  log="$logs/watchmux-strace.log"
  start_watchmux "$logs/watchmux" "$log" --cache-resources configmaps --cache-warm
  bench_env
  strace -c -f -e trace=write,writev,sendmsg,sendto -p "$wm_pid" -o "$logs/strace.txt" 2>/dev/null &
  strace_pid=$!
  sleep 1
  FANOUT_N="$n" FANOUT_SHAPE=h2 FANOUT_SIDES=watchmux FANOUT_RATES=100 FANOUT_SIZES=1024 \
    BENCH_OUT="$logs/strace-$n-h2.json" \
    timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-600}" "$logs/fanout-bench" --bench > "$logs/strace-run.md" ||
    echo "bench-fanout: the strace run failed"
  kill -INT "$strace_pid" 2>/dev/null || true
  wait "$strace_pid" 2>/dev/null || true
  stop_watchmux
  if [[ -s $logs/strace.txt && -s $logs/strace-$n-h2.json ]]; then
    delivered="$(jq '.sides[0].cells[0].received' "$logs/strace-$n-h2.json")"
    echo
    echo "### System calls per delivered event, strace (watchmux only, N=$n, HTTP/2, 100 changes/s of 1 KiB)"
    echo
    echo "Over the whole run (open, idle, the baseline's and the cell's writes), $delivered events delivered;"
    echo "strace slows watchmux down, so its CPU and latency in this run are not figures."
    echo
    echo '| system call | calls | per delivered event |'
    echo '|---|---|---|'
    awk -v d="$delivered" '$NF ~ /^(write|writev|sendmsg|sendto)$/ {
      calls = $4; printf "| %s | %s | %.3f |\n", $NF, calls, calls / d }' \
      "$logs/strace.txt"
    jq -n --arg d "$delivered" --rawfile s "$logs/strace.txt" '{delivered: ($d|tonumber), strace: $s}' \
      > "$logs/strace-summary.json"
  fi
fi
echo
echo "bench-fanout: done in ${SECONDS}s"
