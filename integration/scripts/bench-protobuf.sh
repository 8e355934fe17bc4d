#!/usr/bin/env bash
# Protobuf from the cache (issue 12): what it costs watchmux and what it saves
# clients, in one run on one cluster (integration/cmd/pbbench drives the clients).
#
#  (a) watchmux's RSS holding PB_PODS pods (default 10000) with no protobuf
#      client, with a JSON informer, then after protobuf clients listed and
#      watched (a typed informer: the protobuf memo of each pod version; a
#      PartialObjectMetadataList in protobuf: the metadata memo).
#  (b) CPU of a client-go typed pod informer receiving the same PB_UPDATES
#      updates (default 1000): straight from the API server in protobuf,
#      through watchmux in JSON (what every client got before the cache served
#      protobuf), through watchmux in protobuf. Its sync (the PB_PODS pods) and
#      the updates are counted apart (getrusage of each informer process).
#  (c) PB_WATCHERS (default 1000) plain HTTP/1.1 watchers of the pods, in JSON
#      then in protobuf, each receiving PB_EVENTS (default 300) updates:
#      watchmux's CPU and the bytes per delivered event, and encodes per change.
#
# Usage: bench-protobuf.sh. Results in .run/bench-protobuf/ (results.txt, logs).
# The pods are made once in namespace bench-pb and kept (cluster-down removes them).
listen="127.0.0.1:${BENCH_PORT:-17596}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17597}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
pods="${PB_PODS:-10000}"
updates="${PB_UPDATES:-1000}"
watchers="${PB_WATCHERS:-1000}"
events="${PB_EVENTS:-300}"
ns=bench-pb
logs="$root/.run/bench-protobuf"
mkdir -p "$logs"
rm -f "$logs"/*.json "$logs"/*.out
cargo build --locked --release -q
cp -f "$root/target/release/watchmux" "$logs/watchmux"
(cd "$root/integration" && go build -o "$logs/pbbench" ./cmd/pbbench)
pbbench="$logs/pbbench"
kubectl="$root/.run/kubectl"
kc="$root/.run/kubeconfig"
bench_cluster_up
{
  machine_line
  echo "nproc: $(nproc); free -g: $(free -g | awk '/Mem:/{print $2" total, "$7" available"}'); uname -r: $(uname -r)"
} | tee "$logs/results.txt"

have="$("$kubectl" --kubeconfig "$kc" get pods -n "$ns" -o name --chunk-size=1000 2>/dev/null | wc -l)"
if (( have < pods )); then
  echo "bench-protobuf: creating $pods pods in $ns (have $have)"
  "$pbbench" populate --kubeconfig "$kc" --namespace "$ns" --count "$pods"
fi

start_watchmux "$logs/watchmux" "$logs/watchmux.log" --cache-resources pods --cache-warm
clk="$(getconf CLK_TCK)"
rss_mib() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$wm_pid/status"; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$wm_pid/stat"; }
metric() { curl -fs "http://$admin/metrics" | awk -v m="$1" -v f="${2:-}" 'index($0, m)==1 && (f=="" || index($0, f)) {s+=$NF} END {printf "%d", s}'; }
wm_kc="$logs/kubeconfig-watchmux"
printf 'apiVersion: v1\nkind: Config\ncurrent-context: w\ncontexts:\n- name: w\n  context: {cluster: w, user: w}\nclusters:\n- name: w\n  cluster: {server: "http://%s"}\nusers:\n- name: w\n  user: {}\n' "$listen" > "$wm_kc"

# wait_line <file> <text>: until the file holds the text (a client process's progress), 5 min at most.
wait_line() {
  for _ in $(seq 1 3000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "bench-protobuf: no '$2' in $1" >&2; cat "$1" >&2; exit 1
}

sleep 2
rss0="$(rss_mib)"
informer() { # informer <tag> <kubeconfig> <json|protobuf>
  "$pbbench" informer --kubeconfig "$2" --namespace "$ns" --content "$3" --updates "$updates" > "$logs/informer-$1.out" 2>&1 &
}
informer via-json "$wm_kc" json
wait_line "$logs/informer-via-json.out" synced
rss1="$(rss_mib)"
informer direct-protobuf "$kc" protobuf
informer via-protobuf "$wm_kc" protobuf
wait_line "$logs/informer-direct-protobuf.out" synced
wait_line "$logs/informer-via-protobuf.out" synced
rss2="$(rss_mib)"
curl -fs -o /dev/null -H 'Accept: application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1' \
  "http://$listen/api/v1/namespaces/$ns/pods"
rss3="$(rss_mib)"
pb_encodes_sync="$(metric watchmux_cache_encodes_total 'variant="protobuf"')"
"$pbbench" churn --kubeconfig "$kc" --namespace "$ns" --updates "$updates" --pods "$pods" > "$logs/churn-informers.out"
for tag in direct-protobuf via-json via-protobuf; do wait_line "$logs/informer-$tag.out" '"done"'; done
rss4="$(rss_mib)"

{
  echo
  echo "(a) watchmux RSS, $pods pods cached (MiB): no client $rss0; a JSON informer synced $rss1;"
  echo "    + two protobuf informers synced (the protobuf memo of every pod) $rss2;"
  echo "    + a PartialObjectMetadataList in protobuf (the metadata memo) $rss3; after $updates updates $rss4"
  echo "    protobuf encodes for the sync: $pb_encodes_sync"
  echo
  echo "(b) client-go pod informer CPU (seconds of its own process; sync of $pods pods, then $updates updates):"
  for tag in direct-protobuf via-json via-protobuf; do
    grep '"done"' "$logs/informer-$tag.out" | jq -r --arg t "$tag" '"    \($t): sync \(.sync_cpu_s*100|round/100) s, updates \(.updates_cpu_s*1000|round/1000) s (\(.updates) updates)"'
  done
} | tee -a "$logs/results.txt"

# (c) plain watchers, JSON then protobuf.
echo | tee -a "$logs/results.txt"
echo "(c) $watchers HTTP/1.1 watchers, $events updates each:" | tee -a "$logs/results.txt"
for accept in application/json "application/vnd.kubernetes.protobuf"; do
  rv="$(curl -fs -H 'Accept: application/json' "http://$listen/api/v1/namespaces/$ns/pods?limit=1&resourceVersion=0" | jq -r .metadata.resourceVersion)"
  out="$logs/watchers-${accept##*/}.out"
  "$pbbench" watchers --url "http://$listen/api/v1/namespaces/$ns/pods?watch=true&resourceVersion=$rv" \
    --n "$watchers" --accept "$accept" --events "$events" --timeout 5m > "$out" 2>&1 &
  wpid=$!
  wait_line "$out" connected
  cpu0="$(cpu_ticks)"; enc0="$(metric watchmux_cache_encodes_total 'variant="protobuf"')"
  "$pbbench" churn --kubeconfig "$kc" --namespace "$ns" --updates "$events" --pods "$pods" > "$logs/churn-watchers.out"
  wait "$wpid"
  cpu1="$(cpu_ticks)"; enc1="$(metric watchmux_cache_encodes_total 'variant="protobuf"')"
  tail -1 "$out" | jq -r --arg a "$accept" --argjson cpu "$(( cpu1 - cpu0 ))" --argjson clk "$clk" \
    --argjson enc "$(( enc1 - enc0 ))" --argjson k "$events" \
    '"    \($a): \(.events) events delivered in \(.seconds) s; watchmux CPU \($cpu/$clk) s = \(($cpu/$clk)/.events*1e7|round/10) µs per delivered event; \(.bytes/.events|round) bytes per event; protobuf encodes per change \($enc/$k)"' \
    | tee -a "$logs/results.txt"
done
stop_watchmux
watchmux_warnings "$logs/watchmux.log"
echo
echo "bench-protobuf: done in ${SECONDS}s; results in $logs/results.txt"
