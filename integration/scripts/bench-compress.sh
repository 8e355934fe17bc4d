#!/usr/bin/env bash
# Gzip (issue 24 item 2): what compressing costs and saves, watchmux beside
# kube-apiserver in one run on one cluster.
#
#  (a) A LIST of GZ_PODS pods (default 10000) at resourceVersion=0 (both
#      answer from their watch cache), JSON, GZ_RUNS times (default 10), with
#      and without `Accept-Encoding: gzip`: bytes on the wire, wall time, and
#      the CPU the answering process spent per LIST (/proc/<pid>/stat).
#  (b) A watch-list sync of the same pods (sendInitialEvents=true, ended by
#      timeoutSeconds=GZ_WATCH_SECONDS, default 6), GZ_WATCH_RUNS times
#      (default 3): bytes and CPU per sync, with and without gzip; each run
#      checked to hold the initial-events-end bookmark.
#  (c) The upstream side: the reflector's relist (consistent LIST in pages of
#      500, as src/cache/sync/reflector.rs asks) straight at kube-apiserver
#      over loopback, with and without gzip: wall time, bytes, the API
#      server's CPU, and the client's CPU to inflate the pages (gzip -dc).
#  (d) The same relist done by watchmux itself: a fresh watchmux with
#      --cache-warm (its initial list of the pods, then the watch) and
#      --upstream-gzip-lists=true|false, GZ_RELIST_RUNS times (default 3):
#      time to /readyz, watchmux's CPU to that point, the API server's CPU.
#  (e) (d) through a relay limited to GZ_LINK_MBIT megabits a second each
#      way (default 100; throttle-relay.py): a slow link to a remote API server.
#
# GZ_PARTS chooses the parts (default abcde).
#
# Usage: bench-compress.sh. Results in .run/bench-compress/results.txt.
# The pods are made once in namespace bench-gz and kept.
listen="127.0.0.1:${BENCH_PORT:-17598}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17599}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
pods="${GZ_PODS:-10000}"
runs="${GZ_RUNS:-10}"
watch_runs="${GZ_WATCH_RUNS:-3}"
watch_seconds="${GZ_WATCH_SECONDS:-6}"
ns=bench-gz
logs="$root/.run/bench-compress"
mkdir -p "$logs"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 || ! -x $logs/watchmux ]]; then
  cargo build --locked --release -q
  cp -f "$root/target/release/watchmux" "$logs/watchmux"
  (cd "$root/integration" && go build -o "$logs/pbbench" ./cmd/pbbench)
fi
kubectl="$root/.run/kubectl"
kc="$root/.run/kubeconfig"
bench_cluster_up
# shellcheck source=/dev/null
source "$root/.run/cluster/env"
results="$logs/results.txt"
machine_line | tee "$results"

have="$("$kubectl" --kubeconfig "$kc" get pods -n "$ns" -o name --chunk-size=1000 2>/dev/null | wc -l)"
if (( have < pods )); then
  echo "bench-compress: creating $pods pods in $ns (have $have)"
  "$logs/pbbench" populate --kubeconfig "$kc" --namespace "$ns" --count "$pods"
fi

start_watchmux "$logs/watchmux" "$logs/watchmux.log" --cache-resources pods --cache-warm
api_pid="$(cat "$root/.run/cluster/apiserver.pid")"
clk="$(getconf CLK_TCK)"
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# Not curl's own User-Agent: both would pretty-print JSON for it.
curl_common=(-s -o "$logs/body" -H "User-Agent: bench-compress" -H "Accept: application/json")
direct=(--cacert "$CA_CERT" -H "Authorization: Bearer $ADMIN_TOKEN")

# fetch <who> <url> <gzip: yes|no>: one GET; prints "bytes seconds".
fetch() {
  local extra=()
  [[ $1 == api ]] && extra=("${direct[@]}")
  [[ $3 == yes ]] && extra+=(-H "Accept-Encoding: gzip")
  curl "${curl_common[@]}" "${extra[@]}" -w '%{size_download} %{time_total}\n' "$2"
}

# measure <label> <who: api|wm> <path> <gzip> <runs>: totals over runs, per run.
measure() {
  local label="$1" who="$2" path="$3" gz="$4" n="$5" pid url bytes=0 secs=0 before after
  if [[ $who == api ]]; then pid="$api_pid"; url="$APISERVER_URL$path"; else pid="$wm_pid"; url="http://$listen$path"; fi
  fetch "$who" "$url" "$gz" >/dev/null # warm-up: the watch cache's and watchmux's memo
  before="$(cpu_ticks "$pid")"
  for _ in $(seq 1 "$n"); do
    read -r b s < <(fetch "$who" "$url" "$gz")
    bytes=$((bytes + b))
    secs="$(awk -v a="$secs" -v b="$s" 'BEGIN{print a+b}')"
  done
  after="$(cpu_ticks "$pid")"
  awk -v l="$label" -v b="$bytes" -v s="$secs" -v t=$((after - before)) -v n="$n" -v c="$clk" \
    'BEGIN{printf "%-44s %10.0f bytes  %7.3f s wall  %6.1f ms CPU  (per request, %d runs)\n", l, b/n, s/n, 1000*t/c/n, n}' |
    tee -a "$results"
}

parts="${GZ_PARTS:-abcde}"
list="/api/v1/namespaces/$ns/pods?resourceVersion=0"
watch="/api/v1/namespaces/$ns/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=$watch_seconds"
[[ $parts == *a* ]] && { echo; echo "(a) LIST of $pods pods, JSON, resourceVersion=0"; } | tee -a "$results"
[[ $parts == *a* ]] && for gz in no yes; do
  measure "kube-apiserver, gzip=$gz" api "$list" "$gz" "$runs"
  measure "watchmux, gzip=$gz" wm "$list" "$gz" "$runs"
done

[[ $parts == *b* ]] && { echo; echo "(b) watch-list sync of $pods pods, JSON (the stream ends at timeoutSeconds=$watch_seconds)"; } | tee -a "$results"
[[ $parts == *b* ]] && for gz in no yes; do
  for who in api wm; do
    name="$([[ $who == api ]] && echo kube-apiserver || echo watchmux)"
    measure "$name, gzip=$gz" "$who" "$watch" "$gz" "$watch_runs"
    if [[ $gz == yes ]]; then zcat "$logs/body" > "$logs/body.plain"; else mv "$logs/body" "$logs/body.plain"; fi
    grep -q 'initial-events-end' "$logs/body.plain" || echo "  ($name: no initial-events-end bookmark in the last run)" | tee -a "$results"
  done
done

[[ $parts == *c* ]] && { echo; echo "(c) the reflector's relist straight at kube-apiserver over loopback: consistent LIST, pages of 500"; } | tee -a "$results"
relist() {
  local gz="$1" token="" pages=0 bytes=0 start end before after inflate=0 b
  before="$(cpu_ticks "$api_pid")"
  start="$(date +%s.%N)"
  while :; do
    local path="/api/v1/namespaces/$ns/pods?limit=500"
    [[ -n $token ]] && path+="&continue=$token"
    read -r b _ < <(fetch api "$APISERVER_URL$path" "$gz")
    bytes=$((bytes + b)); pages=$((pages + 1))
    if [[ $gz == yes ]]; then
      local t0 t1
      # gzip is this shell's child: its CPU lands in the shell's cutime+cstime.
      t0="$(awk '{print $16+$17}' "/proc/$$/stat")"
      gzip -dc < "$logs/body" > "$logs/body.plain"
      t1="$(awk '{print $16+$17}' "/proc/$$/stat")"
      inflate=$((inflate + t1 - t0))
    else
      mv "$logs/body" "$logs/body.plain"
    fi
    token="$(jq -r '.metadata.continue // ""' "$logs/body.plain")"
    [[ -z $token ]] && break
    (( pages < 1000 )) || { echo "relist: too many pages" >&2; exit 1; }
  done
  end="$(date +%s.%N)"
  after="$(cpu_ticks "$api_pid")"
  awk -v g="$gz" -v p="$pages" -v b="$bytes" -v s="$start" -v e="$end" -v t=$((after - before)) -v i="$inflate" -v c="$clk" \
    'BEGIN{printf "relist gzip=%-3s %3d pages %10d bytes  %6.2f s wall  %6.0f ms API server CPU  %4.0f ms to inflate\n", g, p, b, e-s, 1000*t/c, 1000*i/c}' |
    tee -a "$results"
}
[[ $parts == *c* ]] && for _ in 1 2; do relist no; relist yes; done
stop_watchmux
watchmux_warnings "$logs/watchmux.log"

# initial_list <label> <kubeconfig>: fresh watchmux starts, alternating the
# upstream gzip setting, GZ_RELIST_RUNS times.
initial_list() {
  for _ in $(seq 1 "${GZ_RELIST_RUNS:-3}"); do
    for gz in false true; do
      api_before="$(cpu_ticks "$api_pid")"
      start="$(date +%s.%N)"
      RUST_LOG=warn "$logs/watchmux" --kubeconfig "$2" --listen "$listen" --admin-listen "$admin" \
        --cache-resources pods --cache-warm --upstream-gzip-lists="$gz" > "$logs/watchmux-relist.log" 2>&1 &
      wm_pid=$!
      for _ in $(seq 1 1200); do
        curl -fs "http://$admin/readyz" >/dev/null 2>&1 && break
        kill -0 "$wm_pid" 2>/dev/null || { echo "bench: watchmux exited" >&2; cat "$logs/watchmux-relist.log" >&2; exit 1; }
        sleep 0.05
      done
      end="$(date +%s.%N)"
      wm_ticks="$(cpu_ticks "$wm_pid")"
      api_after="$(cpu_ticks "$api_pid")"
      stop_watchmux
      awk -v l="$1" -v g="$gz" -v s="$start" -v e="$end" -v w="$wm_ticks" -v a=$((api_after - api_before)) -v c="$clk" \
        'BEGIN{printf "%s --upstream-gzip-lists=%-5s ready in %5.2f s  watchmux CPU %5.0f ms  API server CPU %5.0f ms\n", l, g, e-s, 1000*w/c, 1000*a/c}' |
        tee -a "$results"
    done
  done
  watchmux_warnings "$logs/watchmux-relist.log"
}

if [[ $parts == *d* ]]; then
  { echo; echo "(d) watchmux's own initial list of the pods (--cache-warm, pages of 500) over loopback"; } | tee -a "$results"
  initial_list loopback "$kc"
fi

if [[ $parts == *e* ]]; then
  mbit="${GZ_LINK_MBIT:-100}"
  relay_port="${GZ_RELAY_PORT:-17600}"
  python3 "$scripts/throttle-relay.py" "$relay_port" "${APISERVER_URL#https://}" $((mbit * 125000)) &
  relay_pid=$!
  trap 'kill "$relay_pid" 2>/dev/null || true; bench_cleanup' EXIT
  sed "s#$APISERVER_URL#https://127.0.0.1:$relay_port#" "$kc" > "$logs/kubeconfig-relay"
  { echo; echo "(e) the same through a relay of $mbit Mbit/s each way (throttle-relay.py)"; } | tee -a "$results"
  initial_list "${mbit}Mbit/s" "$logs/kubeconfig-relay"
  kill "$relay_pid" 2>/dev/null || true
fi
