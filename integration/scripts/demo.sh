#!/usr/bin/env bash
# `make demo`: a real kube-apiserver on loopback, watchmux in front of it, and
# a live watch fan-out you can see: several watchers (the Rust example and
# kubectl) watch configmaps THROUGH watchmux while a writer changes them
# DIRECTLY on the API server; watchmux serves them all from one cache fed by
# one upstream watch. Bounded: about half a minute, then everything
# it started is stopped.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"

WATCHERS="${WATCHERS:-3}"
ROUNDS="${ROUNDS:-5}"
listen="127.0.0.1:${DEMO_PORT:-16480}"
admin="127.0.0.1:${DEMO_ADMIN_PORT:-16481}"
ns="watchmux-demo"
kubectl=("$root/.run/kubectl" --kubeconfig "$root/.run/kubeconfig")
logs="$root/.run/demo"
mkdir -p "$logs"

demo_start=$(date +%s)
# Runs a step, printing how long it has been running every 20 s, so that a
# cold first run (minutes of compiling) never looks hung.
with_progress() {
  local label="$1"; shift
  local started=$(date +%s)
  "$@" &
  local pid=$!
  while ! wait_for "$pid" 20; do
    echo "   ... still $label ($(( $(date +%s) - started ))s)"
  done
  wait "$pid"
}
wait_for() {  # pid seconds: true once the process has ended
  local i
  for (( i = 0; i < $2 * 10; i++ )); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

echo "== building the example watcher (release, on top of make release's build: a few minutes cold, then seconds)"
with_progress "building the example watcher" cargo build --locked --release --example watch

started_cluster=0
bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1 || started_cluster=1
pids=()
cleanup() {
  # The watchers first, watchmux (pids[0]) once they are gone: a watcher
  # that saw watchmux stop first would report its stream ending and fail
  # to resume it.
  local i
  for (( i = ${#pids[@]} - 1; i > 0; i-- )); do kill "${pids[i]}" 2>/dev/null || true; done
  for (( i = ${#pids[@]} - 1; i > 0; i-- )); do wait "${pids[i]}" 2>/dev/null || true; done
  if (( ${#pids[@]} > 0 )); then kill "${pids[0]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [[ $started_cluster == 1 ]]; then bash "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap cleanup EXIT
echo "== starting kube-apiserver and etcd on loopback (cold: builds them from the Go modules first, about 5 min on two cores; then seconds)"
with_progress "building or starting the API server" bash "$scripts/cluster-up.sh"

echo "== starting watchmux on $listen (admin $admin) in front of $(grep server: .run/kubeconfig | awk '{print $2}')"
"$root/target/release/watchmux" --kubeconfig "$root/.run/kubeconfig" --listen "$listen" --admin-listen "$admin" \
  2> "$logs/watchmux.log" &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fs "http://$admin/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://$admin/readyz" >/dev/null || { echo "watchmux not ready"; cat "$logs/watchmux.log"; exit 1; }

"${kubectl[@]}" create namespace "$ns" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
"${kubectl[@]}" delete configmaps -n "$ns" --all >/dev/null

cat > "$logs/kubeconfig" <<KC
apiVersion: v1
kind: Config
current-context: watchmux
clusters: [{name: watchmux, cluster: {server: "http://$listen"}}]
contexts: [{name: watchmux, context: {cluster: watchmux, user: local}}]
users: [{name: local, user: {}}]
KC

echo "== $WATCHERS Rust watchers and one kubectl watch, all through watchmux"
echo "   (kubectl prints -o jsonpath, which asks for JSON objects: served from the cache like the Rust"
echo "   watchers. Its default table output asks for as=Table: served from the cache for LIST, GET and"
echo "   WATCH (get -w) of a dozen built-in kinds, ConfigMaps among them.)"
for i in $(seq 1 "$WATCHERS"); do
  "$root/target/release/examples/watch" --server "http://$listen" \
    --path "/api/v1/namespaces/$ns/configmaps" --label "watcher-$i" --seconds 60 &
  pids+=($!)
done
# Its output prefixed through a process substitution, so that $! is kubectl
# itself (a pipeline's $! is its last command: killing sed left kubectl
# watching, and the cleanup waiting for it).
"$root/.run/kubectl" --kubeconfig "$logs/kubeconfig" get configmaps -n "$ns" -w \
  -o jsonpath='{.metadata.name} round={.data.round}{"\n"}' \
  > >(sed -u 's/^/[kubectl -w] /') &
pids+=($!)
sleep 2

echo "== writer: $ROUNDS rounds of create, update, delete straight at the API server"
for r in $(seq 1 "$ROUNDS"); do
  "${kubectl[@]}" create configmap "demo-$r" -n "$ns" --from-literal=round="$r" >/dev/null
  sleep 0.5
  "${kubectl[@]}" patch configmap "demo-$r" -n "$ns" -p "{\"data\":{\"round\":\"$r-updated\"}}" >/dev/null
  sleep 0.5
  if (( r > 1 )); then "${kubectl[@]}" delete configmap "demo-$((r - 1))" -n "$ns" >/dev/null; fi
  sleep 1
done
sleep 1

echo "== watchmux metrics (http://$admin/metrics)"
curl -fs "http://$admin/metrics" \
  | grep -E '^watchmux_(registered_watchers|watch_cache_events_received_total|watch_cache_deliveries_total|cache_encodes_total|passthrough_requests_total|upstream_ready)' \
  | sort
echo "   (one upstream watch feeds every watcher: events received once, delivered to each of the"
echo "   $((WATCHERS + 1)) watchers, encoded once per event; passthrough_requests counts what went upstream)"
echo "== done in $(( $(date +%s) - demo_start ))s; stopping the watchers and watchmux"
