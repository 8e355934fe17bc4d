#!/usr/bin/env bash
# make test-matrix: the end-to-end suite's transparency cases
# (integration/versions/transparency-tests.txt) against every supported
# kube-apiserver minor (integration/versions/minors.txt), each built from its
# own Go modules (build-k8s.sh <minor>). For each minor: start that API
# server and its etcd (cluster-up.sh with WATCHMUX_K8S_MINOR) from an empty
# store, check /version names the release, run the cases, stop it; then one
# summary line a minor. Not part of make test, which keeps the pinned minor.
#
# MATRIX_MINORS="1.35 1.37" chooses minors (default: all). Ports are
# cluster-up.sh's (APISERVER_PORT, ETCD_PORT, ETCD_PEER_PORT). A cluster
# already running in this checkout is stopped first: each minor starts from
# an empty etcd. Logs: .run/matrix/<minor>.log; summary .run/matrix/summary.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
# shellcheck source-path=SCRIPTDIR source=versions-lib.sh
source "$scripts/versions-lib.sh"
cd "$root"

read -r -a minors <<< "${MATRIX_MINORS:-$(versions_minors | tr '\n' ' ')}"
mapfile -t tests < <(grep -v '^#' "$root/integration/versions/transparency-tests.txt" | grep .)
out="$root/.run/matrix"
mkdir -p "$out"
: > "$out/summary"

# The client side is the pinned minor's, whatever the server: kubectl,
# watchcheck and pbcheck as the e2e suite always runs them.
bash "$scripts/build-k8s.sh"
cargo test --locked --features fault-injection --test e2e --no-run

cleanup() { bash "$scripts/cluster-down.sh" >/dev/null 2>&1 || true; }
trap cleanup EXIT

status=0
for minor in "${minors[@]}"; do
  release="$(versions_release "$minor")"
  log="$out/$minor.log"
  start=$(date +%s)
  bash "$scripts/build-k8s.sh" "$minor" 2>&1 | tee "$log"
  bash "$scripts/cluster-down.sh" >> "$log" 2>&1
  if ! WATCHMUX_K8S_MINOR="$minor" bash "$scripts/cluster-up.sh" >> "$log" 2>&1; then
    echo "matrix: $minor ($release): the API server did not start (see $log)" | tee -a "$out/summary"
    status=1; continue
  fi
  # shellcheck disable=SC1091
  source "$root/.run/cluster/env"
  served="$(curl -fsS --cacert "$CA_CERT" -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/version" |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])')"
  if [[ $served != "$release" ]]; then
    echo "matrix: $minor: the API server says $served, not $release" | tee -a "$out/summary"
    status=1; cleanup; continue
  fi
  # kubectl's discovery cache, fresh for each run (as e2e.sh keeps it): it is
  # keyed by host and port, which every minor and every run here share.
  rm -rf "$out/kube-cache"
  set +e
  WATCHMUX_K8S_MINOR="$minor" \
  WATCHMUX_E2E_KUBECONFIG="$root/.run/kubeconfig" WATCHMUX_E2E_KUBECTL="$root/.run/kubectl" \
  WATCHMUX_E2E_WATCHCHECK="$root/.run/bin/watchcheck" WATCHMUX_E2E_PBCHECK="$root/.run/bin/pbcheck" \
  WATCHMUX_E2E_CLUSTER_UP="$scripts/cluster-up.sh" WATCHMUX_E2E_ETCD="$ETCD_ENDPOINT" \
  KUBECACHEDIR="$out/kube-cache" \
    cargo test --locked --features fault-injection --test e2e -- --exact --test-threads=4 "${tests[@]}" >> "$log" 2>&1
  set -e
  passed="$(grep -c '^test .* \.\.\. ok$' "$log" || true)"
  failed="$( (grep '^test .* \.\.\. FAILED$' "$log" || true) | sed 's/^test \(.*\) \.\.\. FAILED$/\1/' | tr '\n' ' ')"
  skipped="$(grep -c '^test .* \.\.\. ignored' "$log" || true)"
  ran=$(( passed + skipped + $(wc -w <<< "$failed") ))
  line="matrix: $minor ($served): $passed passed, $(wc -w <<< "$failed") failed, $skipped skipped of ${#tests[@]} in $(( $(date +%s) - start ))s"
  [[ -z $failed ]] || line+=" (failed: $failed)"
  (( ran == ${#tests[@]} )) || { line+=" (ran $ran: a name in transparency-tests.txt matches no test, or the suite did not finish)"; status=1; }
  [[ -z $failed ]] || status=1
  echo "$line" | tee -a "$out/summary"
  cleanup
done
echo "--- make test-matrix ($(date -u +%F))"
cat "$out/summary"
exit "$status"
