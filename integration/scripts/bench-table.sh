#!/usr/bin/env bash
# Tables (issue 24 item 3, issue 47 item 4): the CPU a `kubectl get`-shaped
# Table costs, watchmux beside kube-apiserver in one run on one cluster.
#
#  (a) A Table LIST of TB_PODS pods (default 2000) at resourceVersion=0 (both
#      answer from their watch cache), `includeObject` left out (kubectl's
#      default: each row's PartialObjectMetadata) and `None`, TB_RUNS times
#      (default 30): bytes and the CPU the answering process spent per LIST
#      (/proc/<pid>/stat), beside the plain JSON LIST of the same pods.
#      TB_BASELINE_BIN=<a watchmux binary>: that build is measured too, the
#      two alternated with kube-apiserver over TB_ROUNDS rounds (default 2;
#      1 without a baseline), a fresh watchmux each time.
#      And a custom resource's: TB_CRS (default 2,000; 0 skips it) objects of
#      a CRD with three printer columns (Phase, Replicas, Age) and a spec of
#      about 3 KiB, listed as a Table with includeObject=None.
#  (b) Table watches: TB_WATCHERS (default 50) `kubectl get -w`-shaped watches
#      (Table, from the list's version) through each server while TB_CHANGES
#      (default 200) pod label patches are made straight at the API server:
#      the CPU each server spent per change while they watched (this build).
#
# Usage: bench-table.sh (BENCH_SKIP_BUILD=1 reuses the copy in
# .run/bench-table). Results in .run/bench-table/results.txt and, for the
# plots, .run/bench-table/table.json. The pods are made once in namespace
# bench-table and kept.
listen="127.0.0.1:${BENCH_PORT:-17601}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17602}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
pods="${TB_PODS:-2000}"
runs="${TB_RUNS:-30}"
crs="${TB_CRS:-2000}"
crd_group="bench.watchmux.dev"
cached="pods"
baseline="${TB_BASELINE_BIN:-}"
rounds="${TB_ROUNDS:-$([[ -n $baseline ]] && echo 2 || echo 1)}"
watchers="${TB_WATCHERS:-50}"
changes="${TB_CHANGES:-200}"
ns="bench-table"
logs="$root/.run/bench-table"
mkdir -p "$logs"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 || ! -x $logs/watchmux ]]; then
  cargo build --locked --release -q
  cp -f "$root/target/release/watchmux" "$logs/watchmux"
fi
kubectl="$root/.run/kubectl"
kc="$root/.run/kubeconfig"
bench_cluster_up
# shellcheck source=/dev/null
source "$root/.run/cluster/env"
results="$logs/results.txt"
machine_line | tee "$results"
measured="$logs/measured.jsonl"
: > "$measured"

have="$("$kubectl" --kubeconfig "$kc" get pods -n "$ns" -o name --chunk-size=1000 2>/dev/null | wc -l)"
if (( have < pods )); then
  echo "bench-table: creating $pods pods in $ns (have $have)"
  "$root/.run/bin/pbbench" populate --kubeconfig "$kc" --namespace "$ns" --count "$pods"
fi
if (( crs > 0 )); then
  # A CRD with printer columns of three types, and its objects (made once, kept).
  "$kubectl" --kubeconfig "$kc" apply -f - > /dev/null <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.$crd_group}
spec:
  group: $crd_group
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    additionalPrinterColumns:
    - {name: Phase, type: string, jsonPath: .status.phase}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
YAML
  "$kubectl" --kubeconfig "$kc" wait --for condition=established --timeout=60s "crd/widgets.$crd_group" > /dev/null
  have="$("$kubectl" --kubeconfig "$kc" get "widgets.$crd_group" -n "$ns" -o name 2>/dev/null | wc -l)"
  if (( have < crs )); then
    echo "bench-table: creating $crs widgets in $ns (have $have)"
    python3 - "$crs" "$ns" > "$logs/widgets.yaml" <<'PY'
import sys
n, ns = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    items = "".join(f"\n  - {{name: item{j}, value: {'x' * 60}}}" for j in range(30))
    print(f"---\napiVersion: bench.watchmux.dev/v1\nkind: Widget\nmetadata: {{name: w{i}, namespace: {ns}}}\n"
          f"spec:\n  replicas: 3\n  items:{items}\nstatus: {{phase: Ready}}")
PY
    "$kubectl" --kubeconfig "$kc" apply -f "$logs/widgets.yaml" > /dev/null
  fi
  cached="pods,widgets.$crd_group,customresourcedefinitions.apiextensions.k8s.io"
fi

api_pid="$(cat "$root/.run/cluster/apiserver.pid")"
clk="$(getconf CLK_TCK)"
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
table="application/json;as=Table;g=meta.k8s.io;v=v1"
# Not curl's own User-Agent: both would pretty-print JSON for it.
curl_common=(-s -o "$logs/body" -H "User-Agent: bench-table")
direct=(--cacert "$CA_CERT" -H "Authorization: Bearer $ADMIN_TOKEN")

# measure <label> <who: api|wm> <path> <accept> <server> <round> <shape>: per
# request over $runs; a line to $measured for table.json.
measure() {
  local label="$1" who="$2" path="$3" accept="$4" server="$5" round="$6" shape="$7" pid url extra=() bytes=0 before after b
  if [[ $who == api ]]; then pid="$api_pid"; url="$APISERVER_URL$path"; extra=("${direct[@]}"); else
    pid="$wm_pid"; url="http://$listen$path"; fi
  curl "${curl_common[@]}" "${extra[@]}" -H "Accept: $accept" "$url" # warm-up
  before="$(cpu_ticks "$pid")"
  for _ in $(seq 1 "$runs"); do
    b="$(curl "${curl_common[@]}" "${extra[@]}" -H "Accept: $accept" -w '%{size_download}' "$url")"
    bytes=$((bytes + b))
  done
  after="$(cpu_ticks "$pid")"
  awk -v l="$label" -v b="$bytes" -v t=$((after - before)) -v n="$runs" -v c="$clk" \
    'BEGIN{printf "%-52s %10.0f bytes  %6.1f ms CPU  (per request, %d runs)\n", l, b/n, 1000*t/c/n, n}' | tee -a "$results"
  jq -nc --arg server "$server" --argjson round "$round" --arg shape "$shape" --argjson bytes $((bytes / runs)) \
    --argjson cpu_ms "$(awk -v t=$((after - before)) -v n="$runs" -v c="$clk" 'BEGIN{printf "%.2f", 1000*t/c/n}')" \
    '{server: $server, round: $round, shape: $shape, bytes: $bytes, cpu_ms: $cpu_ms}' >> "$measured"
}

list="/api/v1/namespaces/$ns/pods?resourceVersion=0"
{ echo; echo "(a) LIST of $pods pods at resourceVersion=0"; } | tee -a "$results"
# measure_all <who> <server> <round>: the three LISTs.
measure_all() {
  measure "$2, JSON" "$1" "$list" "application/json" "$2" "$3" json
  measure "$2, Table (includeObject left out)" "$1" "$list" "$table" "$2" "$3" table-metadata
  measure "$2, Table, includeObject=None" "$1" "$list&includeObject=None" "$table" "$2" "$3" table-none
  if (( crs > 0 )); then
    measure "$2, $crs widgets, Table, includeObject=None" "$1" \
      "/apis/$crd_group/v1/namespaces/$ns/widgets?resourceVersion=0&includeObject=None" "$table" "$2" "$3" cr-table-none
  fi
}
for round in $(seq 1 "$rounds"); do
  measure_all api kube-apiserver "$round"
  if [[ -n $baseline ]]; then
    start_watchmux "$baseline" "$logs/watchmux-baseline.log" --cache-resources "$cached" --cache-warm
    measure_all wm "watchmux (baseline)" "$round"
    stop_watchmux
  fi
  start_watchmux "$logs/watchmux" "$logs/watchmux.log" --cache-resources "$cached" --cache-warm
  measure_all wm watchmux "$round"
  (( round == rounds )) || stop_watchmux
done

# (b) Table watches from the list's version, each a curl reading until killed.
{ echo; echo "(b) $watchers Table watches through each server, $changes pod label patches"; } | tee -a "$results"
rv="$(curl -s "${direct[@]}" "$APISERVER_URL/api/v1/namespaces/$ns/pods?limit=1" | jq -r .metadata.resourceVersion)"
watch_path="/api/v1/namespaces/$ns/pods?watch=true&resourceVersion=$rv"
curls=()
for _ in $(seq 1 "$watchers"); do
  curl -s -N "${direct[@]}" -H "User-Agent: bench-table" -H "Accept: $table" "$APISERVER_URL$watch_path" > /dev/null &
  curls+=($!)
  curl -s -N -H "User-Agent: bench-table" -H "Accept: $table" "http://$listen$watch_path" > /dev/null &
  curls+=($!)
done
sleep 2
api_before="$(cpu_ticks "$api_pid")"
wm_before="$(cpu_ticks "$wm_pid")"
mapfile -t names < <("$kubectl" --kubeconfig "$kc" get pods -n "$ns" -o name --chunk-size=1000 | head -n "$changes")
i=0
for pod in "${names[@]}"; do
  i=$((i + 1))
  "$kubectl" --kubeconfig "$kc" label -n "$ns" "$pod" --overwrite "bench-table=$RANDOM$i" > /dev/null
done
sleep 2
api_after="$(cpu_ticks "$api_pid")"
wm_after="$(cpu_ticks "$wm_pid")"
kill "${curls[@]}" 2>/dev/null || true
encodes="$(curl -s "http://$admin/metrics" | awk '/^watchmux_cache_encodes_total\{variant="table"\}/{print $2}')"
awk -v n="$i" -v w="$watchers" -v a=$((api_after - api_before)) -v m=$((wm_after - wm_before)) -v c="$clk" -v e="${encodes:-0}" \
  'BEGIN{printf "kube-apiserver: %5.2f ms CPU per change (%d watchers; its CPU includes the writes themselves)\nwatchmux:       %5.2f ms CPU per change (%d watchers), %d Table encodes for %d changes\n", 1000*a/c/n, w, 1000*m/c/n, w, e, n}' |
  tee -a "$results"
stop_watchmux
watchmux_warnings "$logs/watchmux.log"
jq -n --arg machine "$(head -1 "$results")" --arg commit "$(git -C "$root" rev-parse --short HEAD)" \
  --arg baseline "$baseline" --argjson pods "$pods" --argjson crs "$crs" --argjson runs "$runs" --slurpfile lists "$measured" \
  --argjson api_ms "$(awk -v a=$((api_after - api_before)) -v c="$clk" -v n="$i" 'BEGIN{printf "%.2f", 1000*a/c/n}')" \
  --argjson wm_ms "$(awk -v m=$((wm_after - wm_before)) -v c="$clk" -v n="$i" 'BEGIN{printf "%.2f", 1000*m/c/n}')" \
  --argjson watchers "$watchers" --argjson changes "$i" --argjson encodes "${encodes:-0}" \
  '{bench: "table", machine: $machine, commit: $commit, baseline: $baseline, pods: $pods, crs: $crs, runs_per_list: $runs,
    lists: $lists, watch: {watchers: $watchers, changes: $changes, kube_apiserver_ms_per_change: $api_ms,
    watchmux_ms_per_change: $wm_ms, table_encodes: $encodes}}' > "$logs/table.json"
echo "bench-table: $logs/table.json"
