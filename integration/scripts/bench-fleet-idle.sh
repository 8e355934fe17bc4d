#!/usr/bin/env bash
# What an idle node-local fleet costs kube-apiserver: one watchmux tier in
# front of the test cluster and FLEET_NODE_LOCALS (20) node-local watchmux
# processes in front of the tier (each caching pods, nodes, services,
# configmaps and secrets, taking watch-lists as the chart's tree does); once
# all are ready, every request kube-apiserver counted in
# `apiserver_request_total` over FLEET_WINDOW seconds (120), by verb,
# resource and subresource, and the tier's shared answers
# (`watchmux_shared_answers_total`) in the same window. Requests kube-apiserver
# makes of itself are in the counts too: run it once with
# FLEET_NODE_LOCALS=0 for the baseline.
#
# Usage: bench-fleet-idle.sh   (make bench-fleet-idle; about 2.5 minutes)
# Everything on loopback; ports 18601-18602 (tier) and 18700+ (node-locals).
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-fleet-idle"
n="${FLEET_NODE_LOCALS:-20}"
window="${FLEET_WINDOW:-120}"
(( n >= 0 && n <= 200 && window > 0 && window <= 3600 )) || { echo "bench-fleet-idle: 0-200 node-locals, a window of 1-3600 s" >&2; exit 2; }
mkdir -p "$logs"
# The watchmux binary only: this bench has no driver of its own.
if [[ ${BENCH_SKIP_BUILD:-0} != 1 || ! -x $logs/watchmux ]]; then
  WATCHMUX_GIT_REVISION="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || true)" \
    cargo build --locked --release -q
  cp -f "$root/target/release/watchmux" "$logs/watchmux"
fi
bench_cluster_up
machine_line

pids=()
fleet_cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  bench_cleanup
}
trap fleet_cleanup EXIT

resources=pods,nodes,services,configmaps,secrets
# wait_ready <admin address> <log>: bounded, 30 s.
wait_ready() {
  for _ in $(seq 1 300); do
    curl -fs "http://$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-fleet-idle: $1 not ready in 30 s" >&2; cat "$2" >&2; exit 1
}
RUST_LOG=warn "$logs/watchmux" --kubeconfig "$root/.run/kubeconfig" --listen 127.0.0.1:18601 \
  --admin-listen 127.0.0.1:18602 --cache-resources "$resources" --cache-warm > "$logs/tier.log" 2>&1 &
pids+=($!)
wait_ready 127.0.0.1:18602 "$logs/tier.log"
cat > "$logs/tier-kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: tier
clusters:
- name: tier
  cluster: {server: "http://127.0.0.1:18601"}
contexts:
- name: tier
  context: {cluster: tier, user: node}
users:
- name: node
  user: {}
EOF
for i in $(seq 1 "$n"); do
  RUST_LOG=warn "$logs/watchmux" --kubeconfig "$logs/tier-kubeconfig" --listen "127.0.0.1:$((18700 + 2 * i))" \
    --admin-listen "127.0.0.1:$((18701 + 2 * i))" --cache-resources "$resources" --cache-warm \
    --upstream-watch-list=true > "$logs/node-local-$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq 1 "$n"); do wait_ready "127.0.0.1:$((18701 + 2 * i))" "$logs/node-local-$i.log"; done

# counts <file>: kube-apiserver's requests by verb:resource:subresource.
counts() {
  curl -fsS --cacert "$root/.run/cluster/ca.crt" -H "Authorization: Bearer $(cut -d, -f1 "$root/.run/cluster/tokens.csv" | head -1)" \
    "$(grep '^APISERVER_URL=' "$root/.run/cluster/env" | cut -d= -f2-)/metrics" |
    python3 -c '
import collections, re, sys
c = collections.Counter()
for line in sys.stdin:
    if line.startswith("apiserver_request_total{"):
        labels = dict(re.findall(r"(\w+)=\"([^\"]*)\"", line.split("}")[0]))
        c["%s:%s:%s" % (labels["verb"], labels["resource"] or "-", labels["subresource"] or "-")] += float(line.split()[-1])
for key, value in sorted(c.items()):
    print(key, int(value))' > "$1"
}
shared() { curl -fsS http://127.0.0.1:18602/metrics | grep '^watchmux_shared_answers_total' | sort > "$1" || true; }
counts "$logs/api-before.txt"; shared "$logs/tier-before.txt"
sleep "$window"
counts "$logs/api-after.txt"; shared "$logs/tier-after.txt"

echo "## A tier and $n node-locals, idle for $window s"
echo
echo "| kube-apiserver served (verb:resource:subresource) | requests |"
echo "|---|---|"
join -a2 -e 0 -o 0,1.2,2.2 "$logs/api-before.txt" "$logs/api-after.txt" | awk '$3 - $2 > 0 {print "| " $1 " | " $3 - $2 " |"}'
echo
echo "| the tier's shared answers | in the window |"
echo "|---|---|"
join -a2 -e 0 -o 0,1.2,2.2 <(sed 's/ /\t/' "$logs/tier-before.txt" | sort) <(sed 's/ /\t/' "$logs/tier-after.txt" | sort) -t $'\t' |
  awk -F'\t' '{print "| " $1 " | " $3 - $2 " |"}'
