#!/usr/bin/env bash
# Fan-out to many watchers, straight at kube-apiserver and through watchmux, in
# one run against the real API server (see integration/bench/fanout.rs).
#
# Usage: bench-fanout.sh [N...]        (default: 1000 10000; or FANOUT_NS="...")
#
# For each N: N watches multiplexed over HTTP/2 connections; and for N=1000
# also one HTTP/1.1 connection per watcher. Each configuration gets a fresh
# release watchmux (--cache-resources configmaps --cache-warm) so that its
# memory figures start from the same point; the API server is shared (and may
# be in use by other tests). Prints the machine line and one Markdown table
# per configuration; docs/benchmarks.md records them.
#
# Bounded: each bench run is cut off after BENCH_RUN_TIMEOUT seconds (240),
# watchmux gets 10 s to stop after SIGTERM.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"
listen="127.0.0.1:${BENCH_PORT:-16492}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-16493}"
run_timeout="${BENCH_RUN_TIMEOUT:-240}"
if [[ $# -gt 0 ]]; then ns=("$@"); else read -r -a ns <<< "${FANOUT_NS:-1000 10000}"; fi
logs="$root/.run/bench-fanout"
mkdir -p "$logs"

# The HTTP/1.1 mode holds one fd per watcher in the bench and in watchmux
# (each has its own limit, inherited from here): ask for the hard limit.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (( $(ulimit -n) < 2048 )); then
  echo "bench-fanout: ulimit -n is $(ulimit -n); the HTTP/1.1 mode needs over 1,000 fds per process" >&2
fi

cargo build --locked --release -q
cargo bench --locked --bench fanout --no-run -q
# Run copies of both binaries, so that a rebuild during the run (cargo bench
# rebuilds the package's binaries too) cannot swap them under the benchmark.
bench_exe="$(cargo bench --locked --bench fanout --no-run --message-format=json -q 2>/dev/null |
  grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep '/fanout-' | tail -1)"
[[ -x $bench_exe ]] || { echo "bench-fanout: no fanout bench executable" >&2; exit 1; }
cp -f "$bench_exe" "$logs/fanout-bench"
cp -f "$root/target/release/watchmux" "$logs/watchmux"

started_cluster=0
if ! bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  started_cluster=1
  bash "$scripts/cluster-up.sh" >/dev/null
fi
pid=""
stop_watchmux() {
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
cleanup() {
  stop_watchmux
  if [[ $started_cluster == 1 ]]; then bash "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap cleanup EXIT

start_watchmux() {  # start_watchmux <log file>
  RUST_LOG=warn "$logs/watchmux" --kubeconfig "$root/.run/kubeconfig" \
    --listen "$listen" --admin-listen "$admin" \
    --cache-resources configmaps --cache-warm > "$1" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do
    curl -fs "http://$admin/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "bench-fanout: watchmux exited" >&2; cat "$1" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench-fanout: watchmux not ready in 15 s" >&2; cat "$1" >&2; exit 1
}

run() {  # run <N> <h2|h1>
  local log="$logs/watchmux-$1-$2.log"
  start_watchmux "$log"
  WATCHMUX_BENCH_KUBECONFIG="$root/.run/kubeconfig" WATCHMUX_BENCH_PROXY="$listen" \
  WATCHMUX_BENCH_ADMIN="$admin" WATCHMUX_BENCH_PROXY_PID="$pid" \
  WATCHMUX_BENCH_APISERVER_PIDFILE="$root/.run/cluster/apiserver.pid" CLK_TCK="$(getconf CLK_TCK)" \
  FANOUT_N="$1" FANOUT_SHAPE="$2" \
    timeout --signal=INT --kill-after=10 "$run_timeout" "$logs/fanout-bench" --bench ||
    echo "bench-fanout: the N=$1 $2 run failed (exit $?); watchmux alive: $(kill -0 "$pid" 2>/dev/null && echo yes || echo no)"
  stop_watchmux
  local warnings
  warnings="$(grep -cE ' (WARN|ERROR) ' "$log" || true)"
  if [[ $warnings != 0 ]]; then
    echo
    echo "watchmux logged $warnings warning/error line(s) during this configuration ($log), first lines:"
    echo
    grep -E ' (WARN|ERROR) ' "$log" | head -5 | sed 's/^/    /'
  fi
}

other_watches="$(
  # shellcheck disable=SC1091
  source "$root/.run/cluster/env"
  curl -fsS --cacert "$CA_CERT" -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/metrics" |
    awk '/^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {s += $NF} END {print s+0}'
)"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u +%F);" \
  "kube-apiserver $("$root/.run/bin/kube-apiserver" --version 2>/dev/null | awk '{print $2}');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at start; $other_watches watches already held by the API server"
echo "cluster: $([[ $started_cluster == 1 ]] && echo "started by this run" || echo "already running (shared with other tests)")"

for n in "${ns[@]}"; do
  run "$n" h2
  if [[ $n == 1000 ]]; then run "$n" h1; fi
done
echo
echo "bench-fanout: done in ${SECONDS}s"
