#!/usr/bin/env bash
# Memory after a storm, by allocator (issue 47, item 4): the kubelet storm of
# bench-scale (watch-list starts through one tier) with watchmux built on
# each allocator in turn (src/allocator.rs: the system's glibc, the cargo
# features jemalloc and mimalloc), on one loaded world, each with a fresh
# tier. For each: the tier's RSS empty, with the caches synced (before the
# storm), at the storm's peak, and every 5 s for a minute after the last
# kubelet synced (the kubelets still on their watches); its CPU and the
# kubelets' time to synced, since an allocator is also a hot path.
#
#   ALLOC_KINDS      the allocators (default: system jemalloc mimalloc)
#   ALLOC_KUBELETS   the storm (default 2000; at most the world's nodes)
#   ALLOC_PREBUILT   a folder with watchmux-<kind> binaries to use instead
#                    of building each (release, the same commit)
#   and bench-scale.sh's knobs; the world defaults to 2,000 nodes with 10
#   pods each, loaded by the first run unless the cluster holds it already.
#
#   ALLOC_PACED      the kubelets at a time of each allocator's second run,
#                    the same clients without a storm: the steady state the
#                    storm's RSS should come back to (default 8)
#
# Results: .run/bench-scale/alloc-<kind>-{storm,paced}.json, each run's
# Markdown on stdout, and a table of the allocators at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
logs="$root/.run/bench-scale"
read -ra kinds <<< "${ALLOC_KINDS:-system jemalloc mimalloc}"
kubelets="${ALLOC_KUBELETS:-2000}"
export SCALE="${SCALE:-light}" SCALE_NODES="${SCALE_NODES:-2000}" SCALE_PODS_PER_NODE="${SCALE_PODS_PER_NODE:-10}" \
  SCALE_KEEP=1 SCALE_SIDES=watchmux SCALE_STORM_MODES=watch-list SCALE_CHURN_SECONDS=0 SCALE_RESTART_CMD= \
  SCALE_RELEASE_SECONDS="${SCALE_RELEASE_SECONDS:-60}" SCALE_KUBELETS="$kubelets"
mkdir -p "$logs"
cd "$root"
revision="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
# The scale bench once; each allocator's watchmux is put beside it in turn
# (bench-scale.sh then builds nothing: BENCH_SKIP_BUILD=1).
if [[ ${BENCH_SKIP_BUILD:-0} != 1 || ! -x $logs/scale-bench ]]; then
  exe="$(cargo bench --locked --bench scale --no-run --message-format=json -q 2>/dev/null |
    jq -r 'select(.executable != null and .target.name == "scale") | .executable' | tail -1)"
  [[ -x $exe ]] || { echo "bench-alloc: no scale bench executable" >&2; exit 1; }
  cp -f "$exe" "$logs/scale-bench"
fi
for kind in "${kinds[@]}"; do
  case "$kind" in
    system) features=(--no-default-features) ;;
    jemalloc) features=() ;;   # the default
    mimalloc) features=(--no-default-features --features mimalloc) ;;
    *) echo "bench-alloc: ALLOC_KINDS takes system, jemalloc and mimalloc, not $kind" >&2; exit 2 ;;
  esac
  echo "bench-alloc: $kind, $kubelets kubelets"
  if [[ -n ${ALLOC_PREBUILT:-} ]]; then
    cp -f "$ALLOC_PREBUILT/watchmux-$kind" "$logs/watchmux"
  else
    WATCHMUX_GIT_REVISION="$revision" cargo build --locked --release -q "${features[@]}"
    cp -f "$root/target/release/watchmux" "$logs/watchmux"
  fi
  "$logs/watchmux" --version | grep -q "allocator $kind" ||
    { echo "bench-alloc: $logs/watchmux is not built with $kind" >&2; exit 1; }
  for start in storm paced; do
    # paced: the same kubelets ALLOC_PACED at a time, no storm: the steady
    # state the storm's RSS should come back to.
    starts=""; [[ $start == paced ]] && starts="${ALLOC_PACED:-8}"
    rm -f "$logs/scale.json"
    # bench-scale.sh skips the load when the running cluster holds this world.
    BENCH_SKIP_BUILD=1 SCALE_STARTS="$starts" SCALE_PHASES=load,memory,storm \
      bash "$root/integration/scripts/bench-scale.sh"
    [[ -f $logs/scale.json ]] || { echo "bench-alloc: no result for $kind ($start)" >&2; exit 1; }
    # Named inside too, for make bench-plots.
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); r.update(allocator=sys.argv[2], start=sys.argv[3]); json.dump(r, open(sys.argv[4], "w"))' \
      "$logs/scale.json" "$kind" "$start" "$logs/alloc-$kind-$start.json"
  done
done
# The release build goes back to the default allocator for the next bench.
[[ -n ${ALLOC_PREBUILT:-} ]] || cargo build --locked --release -q
python3 - "$logs" "${kinds[@]}" <<'PY'
import json, sys
logs, kinds = sys.argv[1], sys.argv[2:]
mib = 1024 * 1024
def storm_of(kind, start):
    r = json.load(open(f"{logs}/alloc-{kind}-{start}.json"))
    return r, [s for s in r["storms"] if s["side"] == "watchmux"][0]
print("\n| allocator | RSS empty / synced, MiB | storm peak, MiB | 5 s / 30 s / 60 s after, MiB | steady (paced start, 60 s after), MiB | after / steady | tier CPU, s | synced p50 / p99, s |")
print("|---|---|---|---|---|---|---|---|")
for kind in kinds:
    r, storm = storm_of(kind, "storm")
    steady = storm_of(kind, "paced")[1]["watchmux_rss_release"][-1]["rss"]
    rel = {x["s"]: x["rss"] for x in storm.get("watchmux_rss_release", [])}
    at = lambda s: f'{rel[s] / mib:.0f}' if s in rel else "–"
    empty = (r.get("memory") or {}).get("watchmux_rss_empty") or 0
    print(f'| {kind} | {empty / mib:.0f} / {storm["watchmux_rss_before"] / mib:.0f} | {storm["watchmux_rss_peak"] / mib:.0f} | '
          f'{storm["watchmux_rss_settled"] / mib:.0f} / {at(30)} / {at(60)} | {steady / mib:.0f} | '
          f'{rel.get(60, 0) / steady:.2f} | {storm["watchmux_cpu_s"]:.1f} | '
          f'{storm["synced_ms"]["p50"] / 1e3:.1f} / {storm["synced_ms"]["p99"] / 1e3:.1f} |')
PY
