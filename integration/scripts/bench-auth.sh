#!/usr/bin/env bash
# What delegated auth adds to a read served from the cache: a trusted-local
# and a delegated watchmux side by side against the real API server (see
# integration/bench/auth.rs). Prints the machine line and a Markdown table.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"

cargo build --locked --release -q
cargo bench --locked --bench auth --no-run -q 2>/dev/null

started_cluster=0
bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1 || started_cluster=1
cleanup() {
  if [[ $started_cluster == 1 ]]; then bash "$scripts/cluster-down.sh" >/dev/null || true; fi
}
trap cleanup EXIT
bash "$scripts/cluster-up.sh" >/dev/null

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); $(date -u +%F)"
WATCHMUX_BENCH_KUBECONFIG="$root/.run/kubeconfig" WATCHMUX_BENCH_BIN="$root/target/release/watchmux" \
  timeout --signal=INT --kill-after=10 300 cargo bench --locked --bench auth -q
