#!/usr/bin/env bash
# Builds the cosign CLI from its Go module, pinned in
# integration/tools/cosign/go.mod, into .run/bin/cosign (make dist signs the
# release image with it and verifies the signature: dist.sh).
#
# Skipped when .run/bin/cosign exists and was built from the same inputs
# (go.mod, go.sum, tools.go, go version), recorded in .run/bin/.cosign.stamp;
# a clean checkout copies it from the machine's tool cache (tool-cache.sh). A
# cold build (modules downloaded) took 4 minutes of CPU, 16 minutes on two
# cores shared with other builds: cosign links the clients of every cloud KMS;
# with Go's build cache warm, about 50 s.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=tool-cache.sh
source "$root/integration/scripts/tool-cache.sh"
mod="$root/integration/tools/cosign"
out="$root/.run/bin"
stamp_file="$out/.cosign.stamp"
mkdir -p "$out"

cosign_version="$(awk '$1 == "require" && $2 == "github.com/sigstore/cosign/v2" { print $3; exit }' "$mod/go.mod")"
[[ -n $cosign_version ]] || { echo "build-cosign: github.com/sigstore/cosign/v2 not required in $mod/go.mod" >&2; exit 1; }
stamp="$( (cat "$mod/go.mod" "$mod/go.sum" "$mod/tools.go"; go version) | sha256sum | cut -d' ' -f1)"

if [[ -f $stamp_file && "$(cat "$stamp_file")" == "$stamp" && -x $out/cosign ]]; then
  echo "build-cosign: cosign up to date ($cosign_version)"
  tool_cache_save cosign "$stamp" "$out" cosign
  exit 0
fi
if tool_cache_restore cosign "$stamp" "$out" cosign; then
  echo "$stamp" > "$stamp_file"
  exit 0
fi

echo "build-cosign: building cosign $cosign_version"
start=$(date +%s)
tmp="$out/cosign.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# The version `cosign version` prints (cosign's own release build sets it so).
ldflags="-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$cosign_version -X sigs.k8s.io/release-utils/version.gitTreeState=clean"
# go.mod and go.sum are tidy: the default -mod=readonly build changes neither.
# cgo as Go's default, as every Go build here (build-helm.sh says why).
(cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$tmp" github.com/sigstore/cosign/v2/cmd/cosign)
mv -f "$tmp" "$out/cosign"
echo "$stamp" > "$stamp_file"
tool_cache_save cosign "$stamp" "$out" cosign
echo "build-cosign: done in $(( $(date +%s) - start ))s"
