#!/usr/bin/env bash
# Shared by the bench-*.sh scripts (sourced, not run): the test cluster (started
# if it is not running, stopped at the end only in that case), a release
# watchmux started fresh per configuration, copies of the binaries (so that a
# rebuild during a run cannot swap them), and the machine line.
#
# Ports: the cluster's come from cluster-up.sh's variables (ETCD_PORT,
# ETCD_PEER_PORT, APISERVER_PORT); watchmux listens on 127.0.0.1:$BENCH_PORT
# (admin $BENCH_ADMIN_PORT), defaults set by each script. Results go to
# .run/bench-<name>/ (logs, and one JSON file per configuration).
# The sourcing script sets listen, admin (watchmux's addresses) and logs (its results folder).
# shellcheck disable=SC2154
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"

# One fd per watcher in the bench and in watchmux for HTTP/1.1 shapes and
# per kubelet: ask for the hard limit (children inherit it).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# bench_build <bench name> <log dir>: release watchmux and the bench, copied to <log dir>.
# BENCH_SKIP_BUILD=1 runs the copies already there (built earlier, e.g.
# before a change, for a before/after comparison in the same minute).
# BENCH_PROFILE=dev builds both in the dev profile instead: for runs that
# check behaviour rather than measure (make test's quick chaos cases), which
# then share the debug build the end-to-end suite made with the same
# features instead of compiling watchmux again in release (minutes cold).
bench_build() {
  mkdir -p "$2"
  if [[ ${BENCH_SKIP_BUILD:-0} == 1 && -x $2/$1-bench && -x $2/watchmux ]]; then return 0; fi
  # BENCH_FEATURES: cargo features of watchmux for this bench (the chaos
  # driver's fault hook); the same for both builds, or the second would
  # rebuild the watchmux binary without them.
  local features=() exe
  if [[ -n ${BENCH_FEATURES:-} ]]; then features=(--features "$BENCH_FEATURES"); fi
  if [[ ${BENCH_PROFILE:-release} == dev ]]; then
    # As the end-to-end suite builds (no revision stamped: a different value
    # would rerun build.rs and rebuild the crate).
    cargo build --locked -q "${features[@]}"
    exe="$(cargo build --locked --profile dev --bench "$1" --message-format=json -q "${features[@]}" 2>/dev/null |
      jq -r "select(.executable != null and .target.name == \"$1\") | .executable" | tail -1)"
    cp -f "$root/target/debug/watchmux" "$2/watchmux"
  else
    # The revision make release and image.sh stamp: any other value reruns
    # build.rs and rebuilds the watchmux crate in release (minutes cold) when
    # make test's image step built it just before.
    local WATCHMUX_GIT_REVISION
    WATCHMUX_GIT_REVISION="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || true)"
    export WATCHMUX_GIT_REVISION
    cargo build --locked --release -q "${features[@]}"
    exe="$(cargo bench --locked --bench "$1" --no-run --message-format=json -q "${features[@]}" 2>/dev/null |
      jq -r "select(.executable != null and .target.name == \"$1\") | .executable" | tail -1)"
    cp -f "$root/target/release/watchmux" "$2/watchmux"
  fi
  [[ -x $exe ]] || { echo "bench: no $1 bench executable" >&2; exit 1; }
  cp -f "$exe" "$2/$1-bench"
}

started_cluster=0
bench_cluster_up() {
  if ! bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
    started_cluster=1
    bash "$scripts/cluster-up.sh" >/dev/null
  fi
}

wm_pid=""
stop_watchmux() {
  [[ -n $wm_pid ]] || return 0
  kill -TERM "$wm_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$wm_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$wm_pid" 2>/dev/null || true
  wait "$wm_pid" 2>/dev/null || true
  wm_pid=""
}
bench_cleanup() {
  stop_watchmux
  if [[ $started_cluster == 1 ]]; then bash "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap bench_cleanup EXIT

# start_watchmux <binary> <log file> <flags...>: on $listen / $admin, waits for /readyz.
# WATCHMUX_ARGS adds flags to every watchmux the benches start, e.g.
# WATCHMUX_ARGS=--h2-write-batching=false to compare.
start_watchmux() {
  local bin="$1" log="$2"; shift 2
  local extra=()
  read -r -a extra <<< "${WATCHMUX_ARGS:-}"
  RUST_LOG=warn "$bin" --kubeconfig "$root/.run/kubeconfig" --listen "$listen" --admin-listen "$admin" \
    "$@" "${extra[@]}" > "$log" 2>&1 &
  wm_pid=$!
  for _ in $(seq 1 300); do
    curl -fs "http://$admin/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$wm_pid" 2>/dev/null || { echo "bench: watchmux exited" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench: watchmux not ready in 30 s" >&2; cat "$log" >&2; exit 1
}

# watchmux_warnings <log>: says so when watchmux logged warnings or errors.
watchmux_warnings() {
  local n
  n="$(grep -cE ' (WARN|ERROR) ' "$1" || true)"
  if [[ $n != 0 ]]; then
    echo
    echo "watchmux logged $n warning/error line(s) ($1), first lines:"
    echo
    # grep stops at five itself: with head, the grep it cut off would fail
    # the pipeline (141) and end the calling bench after a good run.
    grep -m5 -E ' (WARN|ERROR) ' "$1" | sed 's/^/    /'
  fi
}

# run_config <bench> <tag> <cache resources> [VAR=value...]: one configuration
# of a bench with a fresh watchmux (--cache-resources <list> --cache-warm);
# results to $logs/<bench>-<tag>.json, watchmux's log to $logs/watchmux-<tag>.log.
# BENCH_WATCHMUX_CPU and BENCH_LOAD_CPU (taskset core lists, e.g. 1 and 0)
# pin watchmux and the bench's clients apart, so that watchmux's figures are
# not the clients'; kube-apiserver and etcd are left where they run.
run_config() {
  local bench="$1" tag="$2" resources="$3"; shift 3
  local log="$logs/watchmux-$tag.log"
  start_watchmux "$logs/watchmux" "$log" --cache-resources "$resources" --cache-warm
  bench_env
  local pin=()
  if [[ -n ${BENCH_WATCHMUX_CPU:-} ]]; then
    # Every thread of watchmux on its own core(s), the bench's clients on others.
    taskset -apc "$BENCH_WATCHMUX_CPU" "$wm_pid" >/dev/null
    pin=(taskset -c "${BENCH_LOAD_CPU:?BENCH_LOAD_CPU must be set with BENCH_WATCHMUX_CPU}")
  fi
  env "$@" BENCH_OUT="$logs/$bench-$tag.json" \
    timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-600}" "${pin[@]}" "$logs/$bench-bench" --bench ||
    echo "bench-$bench: the $tag run failed (exit $?); watchmux alive: $(kill -0 "$wm_pid" 2>/dev/null && echo yes || echo no)"
  stop_watchmux
  watchmux_warnings "$log"
}

# The variables every bench binary reads.
bench_env() {
  local clk_tck
  clk_tck="$(getconf CLK_TCK)"
  export WATCHMUX_BENCH_KUBECONFIG="$root/.run/kubeconfig" WATCHMUX_BENCH_PROXY="$listen" \
    WATCHMUX_BENCH_ADMIN="$admin" WATCHMUX_BENCH_PROXY_PID="$wm_pid" \
    WATCHMUX_BENCH_APISERVER_PIDFILE="$root/.run/cluster/apiserver.pid" CLK_TCK="$clk_tck"
}

# start_oracle <namespace> <jsonl> <log>: etcd's own watch of the
# namespace's ConfigMap keys (integration/cmd/etcdwatch, the oracle of the
# upgrade and rollout benches) on $ETCD_PORT, in the background
# (oracle_pid); returns once it watches, at most 10 s.
oracle_pid=""
start_oracle() {
  "$root/.run/bin/etcdwatch" --endpoint "http://127.0.0.1:$ETCD_PORT" \
    --prefix "/registry/configmaps/$1/" --out "$2" 2> "$3" &
  oracle_pid=$!
  for _ in $(seq 1 100); do grep -qs watching "$3" && return 0; sleep 0.1; done
  echo "bench: etcdwatch did not start ($3)" >&2
  exit 1
}

# stop_oracle: ends it (it flushes on SIGTERM).
stop_oracle() {
  [[ -n $oracle_pid ]] || return 0
  kill "$oracle_pid" 2>/dev/null || true
  wait "$oracle_pid" 2>/dev/null || true
  oracle_pid=""
}

# run_ingest <watchmux cores> <bench cores> <unselected> [VAR=value...]: one
# configuration of the ingest bench (integration/bench/ingest; bench-ingest.sh
# and bench-cores.sh), its binaries in $logs (bench_build ingest), results in
# $logs/ingest-<cores>-u<unselected><INGEST_TAG>.json; the INGEST_* variables
# pass through. INGEST_BIN: another watchmux binary than $logs/watchmux.
run_ingest() {
  local cores="$1" bench_cores="$2" unselected="$3"; shift 3
  local tag="${cores//-/to}-u$unselected${INGEST_TAG:-}" max=300000
  [[ $unselected == 0 ]] || max=30000
  env WATCHMUX_BIN="${INGEST_BIN:-$logs/watchmux}" WATCHMUX_BENCH_PROXY="$listen" WATCHMUX_BENCH_ADMIN="$admin" \
    INGEST_CPUS="$cores" INGEST_UNSELECTED="$unselected" INGEST_MAX_EVENTS="${INGEST_MAX_EVENTS:-$max}" \
    INGEST_WATCHMUX_LOG="$logs/watchmux-$tag.log" CLK_TCK="$(getconf CLK_TCK)" \
    BENCH_OUT="$logs/ingest-$tag.json" "$@" \
    timeout --signal=INT --kill-after=10 "${BENCH_RUN_TIMEOUT:-600}" \
    taskset -c "$bench_cores" "$logs/ingest-bench" --bench ||
    echo "bench-ingest: the $tag run failed (exit $?)"
  watchmux_warnings "$logs/watchmux-$tag.log"
  echo
}

machine_line() {
  echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u '+%F %H:%M UTC');" \
    "kube-apiserver $("$root/.run/bin/kube-apiserver" --version 2>/dev/null | awk '{print $2}');" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
  echo "cluster: $([[ $started_cluster == 1 ]] && echo "started by this run" || echo "already running")"
}
