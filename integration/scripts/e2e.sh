#!/usr/bin/env bash
# Runs the end-to-end suite against a real kube-apiserver: starts the test
# cluster unless one is already up (and then stops it again at the end), builds
# the client-go checker, runs the Rust e2e tests, a short seeded run of the auth
# fuzzer, the Helm chart checks, and the OCI image under runc (image-test.sh:
# Linux and root).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"

started=0
if ! bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then
  started=1
fi
cleanup() {
  if [[ $started == 1 ]]; then bash "$scripts/cluster-down.sh" || true; fi
}
trap cleanup EXIT
bash "$scripts/cluster-up.sh"

export WATCHMUX_E2E_KUBECONFIG="$root/.run/kubeconfig"
export WATCHMUX_E2E_KUBECTL="$root/.run/kubectl"
export WATCHMUX_E2E_WATCHCHECK="$root/.run/bin/watchcheck"
export WATCHMUX_E2E_PBCHECK="$root/.run/bin/pbcheck"
export WATCHMUX_E2E_CLUSTER_UP="$scripts/cluster-up.sh"
export WATCHMUX_E2E_ETCD="$(grep '^ETCD_ENDPOINT=' "$root/.run/cluster/env" | cut -d= -f2-)"
# kubectl's discovery cache, fresh for each run: the one in ~/.kube/cache is
# keyed by host and port only, so a cluster started again on the same port
# (CRDs created and deleted by earlier runs) would find groups that are gone.
export KUBECACHEDIR="$root/.run/kube-cache"
rm -rf "$KUBECACHEDIR"

# With the test-only fault hook (src/cache/fault.rs): the consistency
# check's test injects faults into the watchmux binary it starts.
cargo test --locked --features fault-injection --test e2e -- --test-threads=4

# The auth fuzzer, short and seeded: its corpus, then 400 generated cases
# (about a minute; `make fuzz-auth` runs 20,000).
bash "$scripts/fuzz-auth.sh" --short

if [[ -x "$scripts/chart-check.sh" || -f "$scripts/chart-check.sh" ]]; then
  bash "$scripts/chart-check.sh" "$root/.run/kubeconfig"
fi

# The image (a release build, then the archive) run with runc against the
# same cluster.
bash "$scripts/image-test.sh"

# That release binary (built without features) carries no fault hook.
bash "$scripts/release-has-no-faults.sh"
