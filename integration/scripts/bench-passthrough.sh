#!/usr/bin/env bash
# Pass-through overhead, direct vs through watchmux, in one run against the
# real API server (see integration/bench/passthrough.rs). Prints a Markdown
# table; docs/benchmarks.md records its output and the machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"
listen="127.0.0.1:${BENCH_PORT:-17590}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17591}"

cargo build --locked --release -q
cargo bench --locked --bench passthrough --no-run -q 2>/dev/null

started_cluster=0
bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1 || started_cluster=1
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  if [[ $started_cluster == 1 ]]; then bash "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap cleanup EXIT
bash "$scripts/cluster-up.sh" >/dev/null

# ConfigMaps are cached by default; this bench measures forwarding, so their cache is off.
RUST_LOG=warn "$root/target/release/watchmux" --kubeconfig "$root/.run/kubeconfig" \
  --listen "$listen" --admin-listen "$admin" --watch-cache-sizes 'configmaps#0' &
pid=$!
for _ in $(seq 1 100); do curl -fs "http://$admin/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u +%F)"
WATCHMUX_BENCH_KUBECONFIG="$root/.run/kubeconfig" WATCHMUX_BENCH_PROXY="$listen" \
  cargo bench --locked --bench passthrough -q
