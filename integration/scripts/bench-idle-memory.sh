#!/usr/bin/env bash
# Memory per idle HTTP/1.1 watcher (issue 14, item 3): for each listener kind
# (plain, TLS) and each round, a fresh release watchmux (--cache-resources
# configmaps --cache-warm), then IDLE_N watches of an empty namespace, one
# connection each, opened by bench-idle-memory.py, which reports the resident
# memory delta per watcher. A fresh process per round, because memory freed
# by the previous round's connections would be reused by the next.
#
# Usage: bench-idle-memory.sh            (IDLE_N=2000, IDLE_ROUNDS=3, IDLE_KINDS="plain tls")
# WATCHMUX_ARGS adds flags to watchmux (see bench-lib.sh); IDLE_CPU pins
# watchmux to that core (taskset), the openers running where they will.
listen="127.0.0.1:${BENCH_PORT:-17592}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17593}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-idle"
mkdir -p "$logs"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
  cargo build --locked --release -q
  cp -f "$root/target/release/watchmux" "$logs/watchmux"
fi
bench_cluster_up
machine_line
if [[ ! -s $logs/tls.key ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$logs/tls.key" -out "$logs/tls.crt" 2>/dev/null
fi
n="${IDLE_N:-2000}"
read -r -a kinds <<< "${IDLE_KINDS:-plain tls}"
echo
echo "| round | watchers | listener | RSS before (KiB) | RSS after (KiB) | KiB per watcher | open time (s) |"
echo "|---|---|---|---|---|---|---|"
for kind in "${kinds[@]}"; do
  flags=(--cache-resources configmaps --cache-warm)
  py=(--addr "$listen" -n "$n" --rounds 1)
  if [[ $kind == tls ]]; then
    flags+=(--tls-cert-file "$logs/tls.crt" --tls-private-key-file "$logs/tls.key")
    py+=(--tls)
  fi
  for r in $(seq 1 "${IDLE_ROUNDS:-3}"); do
    start_watchmux "$logs/watchmux" "$logs/watchmux-$kind-$r.log" "${flags[@]}"
    if [[ -n ${IDLE_CPU:-} ]]; then taskset -apc "$IDLE_CPU" "$wm_pid" >/dev/null; fi
    python3 "$scripts/bench-idle-memory.py" --pid "$wm_pid" --label "$r" "${py[@]}" | tee -a "$logs/rounds.txt" | grep '^|' ||
      echo "bench-idle-memory: the $kind round $r failed"
    stop_watchmux
  done
done
