#!/usr/bin/env bash
# Builds promtool from the Prometheus Go module pinned in
# integration/tools/promtool/go.mod, into .run/bin/promtool (used by
# monitoring-check.sh to check and unit-test the chart's alert rules).
#
# Skipped when the binary exists and was built from the same inputs (go.mod,
# go.sum, tools.go, go version), recorded in .run/bin/promtool.stamp. A cold
# build takes several minutes on two cores; Go's caches keep a rebuild cheap,
# and a clean checkout copies it from the machine's tool cache (tool-cache.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=tool-cache.sh
source "$root/integration/scripts/tool-cache.sh"
mod="$root/integration/tools/promtool"
out="$root/.run/bin/promtool"
stamp_file="$root/.run/bin/promtool.stamp"
mkdir -p "$root/.run/bin"

version="$(awk '{ for (i = 1; i < NF; i++) if ($i == "github.com/prometheus/prometheus") { print $(i + 1); exit } }' "$mod/go.mod")"
[[ -n "$version" ]] || { echo "build-promtool: github.com/prometheus/prometheus not required in $mod/go.mod" >&2; exit 1; }
stamp_inputs="$(cat "$mod/go.mod" "$mod/go.sum" "$mod/tools.go" "$0"; go version)"
stamp="$(printf '%s' "$stamp_inputs" | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" && -x "$out" ]]; then
  echo "build-promtool: promtool up to date ($version)"
  tool_cache_save promtool "$stamp" "$(dirname "$out")" "$(basename "$out")"
  exit 0
fi
if tool_cache_restore promtool "$stamp" "$(dirname "$out")" "$(basename "$out")"; then
  echo "$stamp" > "$stamp_file"
  exit 0
fi

echo "build-promtool: building promtool $version"
start=$(date +%s)
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# The Go module's versions are v0.3MM.P for Prometheus 3.MM.P; promtool
# --version says the latter, as a release build would.
release="$(sed -E 's/^v0\.([0-9])0*([0-9]+)\.([0-9]+).*/\1.\2.\3/' <<<"$version")"
# go.mod and go.sum are tidy: the default -mod=readonly build changes neither.
# remove_all_sd (Prometheus 3.10+) leaves out every service-discovery plugin
# (the AWS, Azure, GCE, Kubernetes... SDKs): checking and unit-testing rules
# and parsing PromQL need none of them, and they were most of a cold build's
# downloads and compile time. cgo as Go's default, as every Go build here
# (build-helm.sh says why).
(cd "$mod" && go build -tags remove_all_sd -trimpath \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
  -o "$tmp" github.com/prometheus/prometheus/cmd/promtool)
mv -f "$tmp" "$out"
echo "$stamp" > "$stamp_file"
tool_cache_save promtool "$stamp" "$(dirname "$out")" "$(basename "$out")"
echo "build-promtool: done in $(( $(date +%s) - start ))s"
