#!/usr/bin/env bash
# Builds the Helm 3 CLI from the official Go module pinned in
# integration/tools/helm/go.mod, into .run/helm (used by chart-check.sh).
#
# Skipped when .run/helm exists and was built from the same inputs (go.mod,
# go.sum, tools.go, go version), recorded in .run/helm.stamp. A cold build takes
# a few minutes on two cores; Go's caches keep a rebuild cheap, and a clean
# checkout copies it from the machine's tool cache (tool-cache.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=tool-cache.sh
source "$root/integration/scripts/tool-cache.sh"
mod="$root/integration/tools/helm"
out="$root/.run/helm"
stamp_file="$root/.run/helm.stamp"
mkdir -p "$root/.run"

helm_version="$(awk '{ for (i = 1; i < NF; i++) if ($i == "helm.sh/helm/v3") { print $(i + 1); exit } }' "$mod/go.mod")"
[[ -n "$helm_version" ]] || { echo "build-helm: helm.sh/helm/v3 not required in $mod/go.mod" >&2; exit 1; }
stamp_inputs="$(cat "$mod/go.mod" "$mod/go.sum" "$mod/tools.go"; go version)"
stamp="$(printf '%s' "$stamp_inputs" | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" && -x "$out" ]]; then
  echo "build-helm: helm up to date ($helm_version)"
  tool_cache_save helm "$stamp" "$(dirname "$out")" "$(basename "$out")"
  exit 0
fi
if tool_cache_restore helm "$stamp" "$(dirname "$out")" "$(basename "$out")"; then
  echo "$stamp" > "$stamp_file"
  exit 0
fi

# Helm's own Makefile derives the default Kubernetes version (used by
# `helm template` and `helm lint` when no cluster is asked) from client-go.
client_go="$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/client-go)"
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version \
  -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor"

echo "build-helm: building helm $helm_version (client-go $client_go)"
start=$(date +%s)
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# go.mod and go.sum are tidy: the default -mod=readonly build changes neither.
# cgo as Go's default (on with a C compiler), as every Go build here: the
# standard library and shared modules are then compiled once for all of them
# (a CGO_ENABLED=0 build compiles net, net/http, crypto/tls... again).
(cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$tmp" helm.sh/helm/v3/cmd/helm)
mv -f "$tmp" "$out"
echo "$stamp" > "$stamp_file"
tool_cache_save helm "$stamp" "$(dirname "$out")" "$(basename "$out")"
echo "build-helm: done in $(( $(date +%s) - start ))s"
